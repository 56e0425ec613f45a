// Encoding and checking remote-cache values. The reader trusts nothing: every
// length is bounded by the bytes actually present before it is used.

#include "remote/remote_value.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <cstring>

#include "remote/hmac.hpp"
#include "xqajit/detail/sha256.hpp"

namespace xqajit::detail {
namespace {

constexpr char kMagic[8] = {'X', 'Q', 'A', 'J', 'I', 'T', 'R', 'V'};
constexpr std::uint32_t kSignedFlag = 1;
constexpr std::size_t kFixedHeader = 88;
constexpr std::size_t kTagSize = 32;

template <typename T>
void put_le(std::string& out, T v) {
  for (std::size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

template <typename T>
T get_le(std::string_view in, std::size_t at) {
  T v = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) v |= T(static_cast<unsigned char>(in[at + i])) << (8 * i);
  return v;
}

std::string_view view(const Sha256Digest& d) { return {reinterpret_cast<const char*>(d.data()), d.size()}; }

}  // namespace

std::string encode_remote_value(const RemoteValueId& id, const std::vector<char>& cubin,
                                std::string_view key) {
  std::string out(kMagic, sizeof kMagic);
  put_le<std::uint32_t>(out, kRemoteValueVersion);
  put_le<std::uint32_t>(out, key.empty() ? 0 : kSignedFlag);
  put_le<std::uint64_t>(out, cubin.size());
  out += sha256_hex(cubin.data(), cubin.size());
  for (const std::string* s : {&id.fingerprint, &id.name, &id.arch}) {
    put_le<std::uint16_t>(out, static_cast<std::uint16_t>(s->size()));
    out += *s;
  }
  out.append(cubin.data(), cubin.size());
  if (!key.empty()) out += view(hmac_sha256(key, {out}));
  return out;
}

DecodedRemoteValue decode_remote_value(std::string_view value, const RemoteValueId& expected,
                                       std::string_view key) {
  DecodedRemoteValue d;
  auto refuse = [&](std::string why) {
    d.problem = std::move(why);
    return d;
  };
  if (value.size() < kFixedHeader) return refuse(fmt::format("only {} bytes (truncated?)", value.size()));
  if (std::memcmp(value.data(), kMagic, sizeof kMagic) != 0) return refuse("not an xqajit value (bad magic)");
  const auto version = get_le<std::uint32_t>(value, 8);
  if (version != kRemoteValueVersion)
    return refuse(fmt::format("format version {}, expected {}", version, kRemoteValueVersion));
  const bool is_signed = (get_le<std::uint32_t>(value, 12) & kSignedFlag) != 0;
  const auto cubin_size = get_le<std::uint64_t>(value, 16);
  const std::string_view sha = value.substr(24, 64);
  // With a key, the signature comes first: nothing unauthenticated is even parsed.
  if (!key.empty()) {
    if (!is_signed) return refuse("unsigned, and XQAJIT_REMOTE_CACHE_KEY requires a signature");
    if (value.size() < kFixedHeader + kTagSize) return refuse("the signature is truncated");
    const std::size_t signed_bytes = value.size() - kTagSize;
    const Sha256Digest tag = hmac_sha256(key, {value.substr(0, signed_bytes)});
    if (!equal_in_constant_time(view(tag), value.substr(signed_bytes)))
      return refuse("bad signature (forged, corrupted, or signed with another key)");
  }

  std::size_t at = kFixedHeader;
  RemoteValueId id;
  for (std::string* s : {&id.fingerprint, &id.name, &id.arch}) {
    if (value.size() < at + 2) return refuse("the header is truncated");
    const auto n = get_le<std::uint16_t>(value, at);
    at += 2;
    if (value.size() < at + n) return refuse("the header is truncated");
    s->assign(value.substr(at, n));
    at += n;
  }
  if (id.fingerprint != expected.fingerprint)
    return refuse(fmt::format("built by toolchain {}, expected {}", id.fingerprint, expected.fingerprint));
  if (id.name != expected.name) return refuse(fmt::format("holds {}, not {}", id.name, expected.name));
  if (id.arch != expected.arch)
    return refuse(fmt::format("built for {}, expected {}", id.arch, expected.arch));

  const std::size_t tag_size = is_signed ? kTagSize : 0;
  if (cubin_size > value.size() || value.size() - at != cubin_size + tag_size)
    return refuse(fmt::format("{} bytes after the header, expected a {}-byte cubin{} (truncated?)",
                              value.size() - at, cubin_size, is_signed ? " and a tag" : ""));
  const std::string_view cubin = value.substr(at, static_cast<std::size_t>(cubin_size));
  if (sha256_hex(cubin.data(), cubin.size()) != sha)
    return refuse("the cubin's SHA-256 does not match (corrupted)");
  d.cubin.emplace(cubin.begin(), cubin.end());
  return d;
}

}  // namespace xqajit::detail
