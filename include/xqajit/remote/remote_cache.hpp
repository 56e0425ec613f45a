#pragma once
/// The remote cache tier: cubins shared by a fleet through one Redis.
///
///   key    xqajit:<fingerprint>:<canonical name>          the value (header + cubin [+ tag])
///   lease  xqajit:<fingerprint>:<canonical name>:lease    who is compiling it now (SET NX PX)
///
/// Every value is checked on read like a bundle entry (magic, format version,
/// fingerprint, name, arch, size, SHA-256, and the HMAC-SHA256 tag when a key is
/// set); a bad value is a miss, is deleted, and is logged once. The tier is never
/// in the way: an unreachable, slow, full or read-only Redis makes get() miss and
/// put() do nothing (one warning per process, reconnects with backoff), and the
/// engine consults it only where it would otherwise compile.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "xqajit/runtime/options.hpp"

namespace xqajit {

namespace detail {
class RemotePool;
}

/// redis://[user:password@]host[:port][/db], parsed.
struct RemoteUrl {
  std::string host;
  int port = 6379;
  int db = 0;
  std::string user;      // empty: the default user (AUTH with a password only)
  std::string password;  // empty: no AUTH
  /// The URL with the password masked, for messages.
  std::string display() const;
};

/// Throws Error naming what is wrong (scheme, port, db) and the expected form.
/// `rediss://` is refused with a clear message: the hiredis we load has no TLS.
RemoteUrl parse_remote_url(const std::string& url);

struct RemoteStats {
  std::uint64_t hits = 0, misses = 0, refused = 0, publishes = 0, lease_waits = 0, unavailable = 0;
};

/// The right to compile one spec for the fleet, renewed in the background while
/// held and released (only if still ours) on destruction. Move-only.
class RemoteLease {
 public:
  RemoteLease();
  RemoteLease(RemoteLease&&) noexcept;
  RemoteLease& operator=(RemoteLease&&) noexcept;
  RemoteLease(const RemoteLease&) = delete;
  RemoteLease& operator=(const RemoteLease&) = delete;
  ~RemoteLease();
  bool held() const { return state_ != nullptr; }

 private:
  friend class RemoteCache;
  struct State;
  std::unique_ptr<State> state_;
};

/// What to do before compiling: use `cubin` (another process published it while
/// we waited), or compile (holding `lease` when the remote granted it).
struct FetchOrLease {
  std::optional<std::vector<char>> cubin;
  RemoteLease lease;
};

struct RemoteEntry {
  std::string name;
  std::uint64_t bytes = 0;
};

struct RemoteProbe {
  double latency_ms = 0;    // one PING round trip
  std::size_t entries = 0;  // values under this fingerprint
  std::string server_version;
};

class RemoteCache {
 public:
  /// Does not connect (the first get does). Throws Error for a malformed URL and
  /// LibraryError when hiredis cannot be loaded.
  RemoteCache(const Options& options, std::string fingerprint);
  ~RemoteCache();
  RemoteCache(const RemoteCache&) = delete;
  RemoteCache& operator=(const RemoteCache&) = delete;

  const RemoteUrl& url() const;
  const std::string& fingerprint() const { return fingerprint_; }
  bool signing() const { return !key_.empty(); }
  /// "xqajit:<fingerprint>:<name>".
  std::string key_of(const std::string& name) const;

  /// The cubin of `name` built for `arch`, or nullopt for a miss, a refused value
  /// or an unreachable remote. Never throws.
  std::optional<std::vector<char>> get(const std::string& name, const std::string& arch);
  /// Stores the cubin (signed when a key is set). Never throws; false when not stored.
  bool put(const std::string& name, const std::string& arch, const std::vector<char>& cubin);
  /// Fleet-wide compile-once: takes the lease, or waits (up to remote_wait_ms)
  /// for the holder's value. Past the bound, or with the remote down, returns an
  /// unheld lease: compile locally. Never throws.
  FetchOrLease fetch_or_lease(const std::string& name, const std::string& arch);

  // For the CLI; these throw RemoteError when the remote cannot be reached.
  RemoteProbe probe();
  std::vector<RemoteEntry> list();
  /// Removes every value of this fingerprint. Returns how many.
  std::size_t clear();

  RemoteStats stats() const;

 private:
  std::optional<std::vector<char>> fetch(const std::string& name, const std::string& arch, bool count_miss);
  /// Held: ours. Unheld with *busy: another process holds it. Unheld otherwise: no remote.
  RemoteLease try_lease(const std::string& name, bool* busy);

  std::shared_ptr<detail::RemotePool> pool_;
  std::string fingerprint_, key_;
  int wait_ms_, lease_ms_;
  struct Counters;
  std::unique_ptr<Counters> counters_;
};

}  // namespace xqajit
