// SHA-256 against the FIPS 180-4 / NIST test vectors, plus block-boundary lengths
// where padding bugs hide.

#include <catch2/catch.hpp>

#include <string>

#include "xqajit/detail/sha256.hpp"

using xqajit::detail::sha256_hex;

TEST_CASE("sha256 matches the standard test vectors", "[sha256]") {
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(sha256_hex(
            "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrs"
            "mnopqrstnopqrstu") == "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  CHECK(sha256_hex(std::string(1000000, 'a')) ==
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("sha256 pads correctly around block boundaries", "[sha256]") {
  // 55 bytes is the longest message whose length fits in the first block; 56 and
  // 64 need a second one.
  CHECK(sha256_hex(std::string(55, 'a')) ==
        "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
  CHECK(sha256_hex(std::string(56, 'a')) ==
        "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
  CHECK(sha256_hex(std::string(64, 'a')) ==
        "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
}

TEST_CASE("sha256 hashes arbitrary bytes, not C strings", "[sha256]") {
  const std::string with_nul("a\0b", 3);
  CHECK(sha256_hex(with_nul) != sha256_hex("a"));
  CHECK(sha256_hex(with_nul.data(), with_nul.size()) == sha256_hex(with_nul));
  CHECK(sha256_hex("abd") != sha256_hex("abc"));
}

// HMAC-SHA256 (signs remote-cache values) against RFC 4231's test cases 1-4, 6, 7.
#include "remote/hmac.hpp"

TEST_CASE("hmac-sha256 matches RFC 4231", "[sha256][hmac]") {
  using xqajit::detail::hmac_sha256;
  using xqajit::detail::to_hex;
  CHECK(to_hex(hmac_sha256(std::string(20, '\x0b'), {"Hi There"})) ==
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  CHECK(to_hex(hmac_sha256("Jefe", {"what do ya want for nothing?"})) ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  CHECK(to_hex(hmac_sha256(std::string(20, '\xaa'), {std::string(50, '\xdd')})) ==
        "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  std::string key4;
  for (char c = 1; c <= 25; ++c) key4.push_back(c);
  CHECK(to_hex(hmac_sha256(key4, {std::string(50, '\xcd')})) ==
        "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
  // Keys longer than the 64-byte block are hashed first.
  CHECK(to_hex(hmac_sha256(std::string(131, '\xaa'),
                           {"Test Using Larger Than Block-Size Key - Hash Key First"})) ==
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  CHECK(to_hex(hmac_sha256(
            std::string(131, '\xaa'),
            {"This is a test using a larger than block-size key and a larger than block-size data. "
             "The key needs to be hashed before being used by the HMAC algorithm."})) ==
        "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

TEST_CASE("hmac-sha256 of parts equals hmac of their concatenation", "[sha256][hmac]") {
  using xqajit::detail::hmac_sha256;
  CHECK(hmac_sha256("k", {"abc", "", "def"}) == hmac_sha256("k", {"abcdef"}));
  CHECK(hmac_sha256("k", {"abcdef"}) != hmac_sha256("K", {"abcdef"}));
  CHECK(xqajit::detail::equal_in_constant_time("abc", "abc"));
  CHECK_FALSE(xqajit::detail::equal_in_constant_time("abc", "abd"));
  CHECK_FALSE(xqajit::detail::equal_in_constant_time("abc", "ab"));
}
