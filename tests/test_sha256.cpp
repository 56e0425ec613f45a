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
