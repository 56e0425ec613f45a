#pragma once
/// SHA-256, for cache and bundle checksums and the template hash.

#include <array>
#include <cstddef>
#include <initializer_list>
#include <string>
#include <string_view>

namespace xqajit::detail {

/// Lowercase hex digest of `size` bytes at `data`.
std::string sha256_hex(const void* data, std::size_t size);
inline std::string sha256_hex(std::string_view s) { return sha256_hex(s.data(), s.size()); }

using Sha256Digest = std::array<unsigned char, 32>;
/// The raw digest of the concatenation of `count` parts (no copy is made of them).
Sha256Digest sha256_digest(const std::string_view* parts, std::size_t count);
inline Sha256Digest sha256_digest(std::initializer_list<std::string_view> parts) {
  return sha256_digest(parts.begin(), parts.size());
}

}  // namespace xqajit::detail
