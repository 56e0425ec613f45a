#pragma once
/// Every environment variable xqajit reads, read once, in one place.
/// The README's table of environment variables mirrors this struct.

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace xqajit {

struct Options {
  /// XQAJIT_CACHE_DIR, else $XDG_CACHE_HOME/xqajit, else ~/.cache/xqajit.
  std::filesystem::path cache_dir;
  /// XQAJIT_DISK_CACHE=0 keeps compiled cubins in memory only.
  bool disk_cache = true;
  /// XQAJIT_CACHE_MAX_BYTES: after each publish, evict least-recently-used
  /// entries until the cache is under this size. 0 = unbounded.
  std::uint64_t cache_max_bytes = 0;
  /// XQAJIT_BUNDLES: ':'-separated bundle files or directories of bundles,
  /// searched before the disk cache.
  std::vector<std::filesystem::path> bundles;
  /// XQAJIT_NO_COMPILE=1: never run NVRTC; a kernel must come from a bundle or the cache.
  bool no_compile = false;
  /// XQAJIT_TUNING: "" (default: every <cache_dir>/tuning/*.json), "off"
  /// (heuristic plans only), or the path of one tuning table. The engine
  /// publishes it for decode_plan / mla_decode_plan (tuning.hpp).
  std::string tuning;
  /// XQAJIT_TEMPLATE_DIR: read kernel templates from this folder instead of the
  /// copy embedded in the library (for kernel development).
  std::filesystem::path template_dir;
  /// XQAJIT_LOG_LEVEL: trace, debug, info, warn (default), error, off.
  std::string log_level = "warn";
  /// XQAJIT_LIBCUDA / XQAJIT_LIBNVRTC: explicit paths of the driver and NVRTC libraries.
  std::string libcuda_path;
  std::string libnvrtc_path;
  /// XQAJIT_LIBHIREDIS: explicit path of the hiredis library (the remote tier's client).
  std::string libhiredis_path;

  // The remote (Redis) tier, shared by a fleet; see remote_cache.hpp.
  /// XQAJIT_REMOTE_CACHE: redis://[user:password@]host[:port][/db]; empty = no remote tier.
  std::string remote_cache;
  /// XQAJIT_REMOTE_CACHE_KEY: shared secret; values are signed (HMAC-SHA256) and
  /// unsigned or badly signed values refused.
  std::string remote_cache_key;
  /// XQAJIT_REMOTE_CONNECT_TIMEOUT_MS / XQAJIT_REMOTE_TIMEOUT_MS: connect and per-command bounds.
  int remote_connect_timeout_ms = 100;
  int remote_timeout_ms = 500;
  /// XQAJIT_REMOTE_WAIT_MS: how long to wait for another process's compile of
  /// the same spec before compiling locally.
  int remote_wait_ms = 30000;
  /// XQAJIT_REMOTE_RETRY_MS: first pause before reconnecting to an unreachable
  /// remote (doubles on each failure, up to 30 s).
  int remote_retry_ms = 1000;
  /// The compile lease's time to live; renewed every third of it while compiling.
  /// (No variable: a library knob for tests of an expiring lease.)
  int remote_lease_ms = 5000;

  /// Reads the variables above; unset ones keep their defaults.
  static Options from_env();
};

/// The default cache root for the current environment (see Options::cache_dir).
std::filesystem::path default_cache_dir();

/// Applies XQAJIT_LOG_LEVEL (or `level`) to xqajit's spdlog logger.
void set_log_level(const std::string& level);

}  // namespace xqajit
