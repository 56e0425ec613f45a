#pragma once
/// The bytes of a remote-cache value: a small versioned header, the cubin, and
/// (when the fleet shares a key) an HMAC-SHA256 tag over both.
///
///   0   8  magic "XQAJITRV"
///   8   4  format version (little-endian u32, kRemoteValueVersion)
///   12  4  flags (bit 0: signed, a 32-byte tag follows the cubin)
///   16  8  cubin size in bytes (u64)
///   24  64 SHA-256 of the cubin, lowercase hex
///   88  fingerprint, name, arch: each a u16 length and its bytes
///   ..  the cubin
///   ..  [tag: HMAC-SHA256(key, every byte before it)]

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace xqajit::detail {

constexpr unsigned kRemoteValueVersion = 1;

/// What a value says it is; a reader checks all three against what it asked for.
struct RemoteValueId {
  std::string fingerprint, name, arch;
};

/// Signs with `key` when it is not empty.
std::string encode_remote_value(const RemoteValueId& id, const std::vector<char>& cubin,
                                std::string_view key);

struct DecodedRemoteValue {
  std::optional<std::vector<char>> cubin;  // set when the value passed every check
  std::string problem;                     // otherwise, why it was refused
};

/// Checks everything; with a non-empty `key` an unsigned or badly signed value is refused.
DecodedRemoteValue decode_remote_value(std::string_view value, const RemoteValueId& expected,
                                       std::string_view key);

}  // namespace xqajit::detail
