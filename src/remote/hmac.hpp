#pragma once
/// HMAC-SHA256 (RFC 2104) on top of xqajit/detail/sha256.hpp: signs remote-cache values.

#include <initializer_list>
#include <string>
#include <string_view>

#include "xqajit/detail/sha256.hpp"

namespace xqajit::detail {

/// The tag of the concatenation of `message_parts` under `key`.
Sha256Digest hmac_sha256(std::string_view key, std::initializer_list<std::string_view> message_parts);

/// Lowercase hex of a digest.
std::string to_hex(const Sha256Digest& digest);

/// Equality that takes the same time wherever the first difference is, so a
/// forger learns nothing from how fast a tag is refused.
bool equal_in_constant_time(std::string_view a, std::string_view b);

}  // namespace xqajit::detail
