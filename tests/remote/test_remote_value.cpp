// The remote cache's value format and URL parsing: no server needed. Every check
// a reader makes on a value from the network is exercised by a value that fails it.
#include <catch2/catch.hpp>

#include "remote/remote_value.hpp"
#include "xqajit/error.hpp"
#include "xqajit/remote/remote_cache.hpp"

using namespace xqajit;
using detail::decode_remote_value;
using detail::encode_remote_value;
using detail::RemoteValueId;

namespace {

const RemoteValueId kId{"v1-nvrtc13.0-t0123456789abcdef",
                        "gqa_fp16_kvfp16_ofp16_d128_p64_g8_q1_sw0_t128_sm90a", "sm_90a"};

std::vector<char> some_cubin() {
  std::vector<char> c(3000);
  for (std::size_t i = 0; i < c.size(); ++i) c[i] = static_cast<char>(i * 7 + 1);
  return c;
}

std::string refused_because(const std::string& value, const RemoteValueId& id = kId,
                            const std::string& key = {}) {
  const auto d = decode_remote_value(value, id, key);
  return d.cubin ? std::string("accepted") : d.problem;
}

}  // namespace

TEST_CASE("a value round trips, signed or not", "[remote][value]") {
  const auto cubin = some_cubin();
  for (const std::string key : {"", "fleet secret"}) {
    const std::string value = encode_remote_value(kId, cubin, key);
    const auto d = decode_remote_value(value, kId, key);
    REQUIRE(d.cubin);
    CHECK(*d.cubin == cubin);
  }
  // A reader without the key still checks the SHA-256 of a signed value.
  CHECK(decode_remote_value(encode_remote_value(kId, cubin, "k"), kId, "").cubin);
  CHECK(decode_remote_value(encode_remote_value(kId, {}, ""), kId, "").cubin);  // empty cubin
}

TEST_CASE("a flipped byte anywhere is refused", "[remote][value]") {
  const std::string good = encode_remote_value(kId, some_cubin(), "");
  const std::string signed_good = encode_remote_value(kId, some_cubin(), "key");
  for (std::size_t at : {std::size_t(0), std::size_t(9), std::size_t(20), std::size_t(30), std::size_t(100),
                         good.size() / 2, good.size() - 1}) {
    std::string bad = good;
    bad[at] ^= 0x10;
    INFO("byte " << at);
    CHECK(refused_because(bad) != "accepted");
  }
  // With a key, a flip in the cubin, the header or the tag fails the signature.
  for (std::size_t at : {std::size_t(100), signed_good.size() / 2, signed_good.size() - 1}) {
    std::string bad = signed_good;
    bad[at] ^= 0x01;
    CHECK_THAT(refused_because(bad, kId, "key"), Catch::Contains("signature"));
  }
  std::string cubin_flip = good;
  cubin_flip[good.size() - 10] ^= 1;
  CHECK_THAT(refused_because(cubin_flip), Catch::Contains("SHA-256"));
}

TEST_CASE("a value for another toolchain, spec or arch is refused", "[remote][value]") {
  const std::string value = encode_remote_value(kId, some_cubin(), "");
  RemoteValueId other = kId;
  other.fingerprint = "v1-nvrtc12.9-t0123456789abcdef";
  CHECK_THAT(refused_because(value, other), Catch::Contains("toolchain"));
  other = kId, other.name += "x";
  CHECK_THAT(refused_because(value, other), Catch::Contains("holds"));
  other = kId, other.arch = "sm_90";
  CHECK_THAT(refused_because(value, other), Catch::Contains("built for"));
}

TEST_CASE("a truncated value is refused at every length", "[remote][value]") {
  const std::string value = encode_remote_value(kId, some_cubin(), "");
  for (std::size_t n :
       {std::size_t(0), std::size_t(7), std::size_t(87), std::size_t(95), value.size() / 2, value.size() - 1})
    CHECK(refused_because(value.substr(0, n)) != "accepted");
  CHECK(refused_because(value + "x") != "accepted");
  CHECK_THAT(refused_because("garbage that is long enough to hold a header but is not one at all, "
                             "not even close, no magic"),
             Catch::Contains("magic"));
}

TEST_CASE("with a key, unsigned and wrongly signed values are refused", "[remote][value]") {
  const auto cubin = some_cubin();
  CHECK_THAT(refused_because(encode_remote_value(kId, cubin, ""), kId, "key"), Catch::Contains("unsigned"));
  CHECK_THAT(refused_because(encode_remote_value(kId, cubin, "other key"), kId, "key"),
             Catch::Contains("signature"));
  // An attacker who strips the tag and clears the flag gets "unsigned", not "accepted".
  std::string stripped = encode_remote_value(kId, cubin, "key");
  stripped.resize(stripped.size() - 32);
  stripped[12] = 0;
  CHECK_THAT(refused_because(stripped, kId, "key"), Catch::Contains("unsigned"));
  CHECK(refused_because(stripped, kId, "") == "accepted");  // intact bytes: fine for a keyless reader
}

TEST_CASE("remote URLs parse, and mistakes are named", "[remote][url]") {
  RemoteUrl u = parse_remote_url("redis://cache.internal:6380/2");
  CHECK(u.host == "cache.internal");
  CHECK(u.port == 6380);
  CHECK(u.db == 2);
  CHECK(u.password.empty());
  u = parse_remote_url("redis://alice:s3cr@t@10.0.0.5");
  CHECK(u.host == "10.0.0.5");
  CHECK(u.port == 6379);
  CHECK(u.user == "alice");
  CHECK(u.password == "s3cr@t");
  CHECK(u.display() == "redis://alice:***@10.0.0.5:6379/0");
  u = parse_remote_url("redis://:pw@[::1]:7000");
  CHECK(u.host == "::1");
  CHECK(u.port == 7000);
  CHECK(u.user.empty());
  CHECK(u.password == "pw");
  CHECK(parse_remote_url("redis://default:pw@h").user.empty());
  CHECK_THROWS_WITH(parse_remote_url("http://h"), Catch::Contains("redis://"));
  CHECK_THROWS_WITH(parse_remote_url("redis://h:99999"), Catch::Contains("port"));
  CHECK_THROWS_WITH(parse_remote_url("redis://h/x"), Catch::Contains("database"));
  CHECK_THROWS_WITH(parse_remote_url("redis://"), Catch::Contains("no host"));
  CHECK_THROWS_WITH(parse_remote_url("rediss://h"), Catch::Contains("TLS"));
}
