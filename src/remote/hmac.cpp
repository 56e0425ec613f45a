// HMAC-SHA256 (RFC 2104): H((K ^ opad) || H((K ^ ipad) || m)), K padded to the
// 64-byte block (hashed first when longer). Checked against RFC 4231's vectors.

#include "remote/hmac.hpp"

#include <algorithm>
#include <array>
#include <vector>

namespace xqajit::detail {
namespace {

constexpr std::size_t kBlock = 64;

std::string_view view(const Sha256Digest& d) { return {reinterpret_cast<const char*>(d.data()), d.size()}; }

}  // namespace

Sha256Digest hmac_sha256(std::string_view key, std::initializer_list<std::string_view> message_parts) {
  std::array<char, kBlock> padded{};
  if (key.size() > kBlock) {
    const Sha256Digest hashed = sha256_digest({key});
    std::copy(hashed.begin(), hashed.end(), padded.begin());
  } else {
    std::copy(key.begin(), key.end(), padded.begin());
  }
  std::array<char, kBlock> inner_pad{}, outer_pad{};
  for (std::size_t i = 0; i < kBlock; ++i) {
    inner_pad[i] = static_cast<char>(padded[i] ^ 0x36);
    outer_pad[i] = static_cast<char>(padded[i] ^ 0x5c);
  }
  std::vector<std::string_view> parts = {std::string_view(inner_pad.data(), kBlock)};
  parts.insert(parts.end(), message_parts.begin(), message_parts.end());
  const Sha256Digest inner = sha256_digest(parts.data(), parts.size());
  return sha256_digest({std::string_view(outer_pad.data(), kBlock), view(inner)});
}

std::string to_hex(const Sha256Digest& digest) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(64);
  for (unsigned char b : digest) out.push_back(kHex[b >> 4]), out.push_back(kHex[b & 0xf]);
  return out;
}

bool equal_in_constant_time(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace xqajit::detail
