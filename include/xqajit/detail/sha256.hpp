#pragma once
/// SHA-256, for cache and bundle checksums and the template hash.

#include <cstddef>
#include <string>
#include <string_view>

namespace xqajit::detail {

/// Lowercase hex digest of `size` bytes at `data`.
std::string sha256_hex(const void* data, std::size_t size);
inline std::string sha256_hex(std::string_view s) { return sha256_hex(s.data(), s.size()); }

}  // namespace xqajit::detail
