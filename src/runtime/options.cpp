#include "xqajit/runtime/options.hpp"

#include <fmt/format.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>
#include <mutex>
#include <sstream>

#include "util/log.hpp"
#include "xqajit/error.hpp"

namespace xqajit {
namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

bool env_flag(const char* name, bool fallback) {
  const char* v = env(name);
  if (!v) return fallback;
  const std::string s(v);
  if (s == "1" || s == "true" || s == "on" || s == "yes") return true;
  if (s == "0" || s == "false" || s == "off" || s == "no") return false;
  throw Error(fmt::format("environment variable {}={} is not a boolean (use 1 or 0)", name, s));
}

int env_millis(const char* name, int fallback) {
  const char* v = env(name);
  if (!v) return fallback;
  char* end = nullptr;
  const long ms = std::strtol(v, &end, 10);
  if (!end || *end != '\0' || ms < 0 || ms > 3600 * 1000)
    throw Error(
        fmt::format("environment variable {}={} is not a number of milliseconds (0 to 3600000)", name, v));
  return static_cast<int>(ms);
}

}  // namespace

std::filesystem::path default_cache_dir() {
  if (const char* v = env("XQAJIT_CACHE_DIR")) return v;
  if (const char* v = env("XDG_CACHE_HOME")) return std::filesystem::path(v) / "xqajit";
  if (const char* v = env("HOME")) return std::filesystem::path(v) / ".cache" / "xqajit";
  return std::filesystem::temp_directory_path() / "xqajit-cache";
}

Options Options::from_env() {
  Options o;
  o.cache_dir = default_cache_dir();
  o.disk_cache = env_flag("XQAJIT_DISK_CACHE", true);
  if (const char* v = env("XQAJIT_CACHE_MAX_BYTES")) {
    char* end = nullptr;
    o.cache_max_bytes = std::strtoull(v, &end, 10);
    if (!end || *end != '\0')
      throw Error(fmt::format("XQAJIT_CACHE_MAX_BYTES={} is not a byte count", v));
  }
  if (const char* v = env("XQAJIT_BUNDLES")) {
    std::stringstream ss(v);
    for (std::string item; std::getline(ss, item, ':');)
      if (!item.empty()) o.bundles.emplace_back(item);
  }
  o.no_compile = env_flag("XQAJIT_NO_COMPILE", false);
  if (const char* v = env("XQAJIT_TEMPLATE_DIR")) o.template_dir = v;
  if (const char* v = env("XQAJIT_TUNING")) o.tuning = v;
  if (const char* v = env("XQAJIT_LOG_LEVEL")) o.log_level = v;
  if (const char* v = env("XQAJIT_LIBCUDA")) o.libcuda_path = v;
  if (const char* v = env("XQAJIT_LIBNVRTC")) o.libnvrtc_path = v;
  if (const char* v = env("XQAJIT_LIBHIREDIS")) o.libhiredis_path = v;
  if (const char* v = env("XQAJIT_REMOTE_CACHE")) o.remote_cache = v;
  if (const char* v = env("XQAJIT_REMOTE_CACHE_KEY")) o.remote_cache_key = v;
  o.remote_connect_timeout_ms = env_millis("XQAJIT_REMOTE_CONNECT_TIMEOUT_MS", o.remote_connect_timeout_ms);
  o.remote_timeout_ms = env_millis("XQAJIT_REMOTE_TIMEOUT_MS", o.remote_timeout_ms);
  o.remote_wait_ms = env_millis("XQAJIT_REMOTE_WAIT_MS", o.remote_wait_ms);
  o.remote_retry_ms = env_millis("XQAJIT_REMOTE_RETRY_MS", o.remote_retry_ms);
  return o;
}

void set_log_level(const std::string& level) {
  const auto lvl = spdlog::level::from_str(level);
  // from_str maps unknown names to "off"; only accept that for "off" itself.
  if (lvl == spdlog::level::off && level != "off")
    throw Error(fmt::format("log level '{}' is not one of trace, debug, info, warn, error, off", level));
  detail::logger()->set_level(lvl);
}

namespace detail {

std::shared_ptr<spdlog::logger> logger() {
  static std::once_flag once;
  static std::shared_ptr<spdlog::logger> log;
  std::call_once(once, [] {
    log = spdlog::get("xqajit");
    if (!log) {
      log = spdlog::stderr_color_mt("xqajit");
      log->set_pattern("[xqajit %l] %v");
    }
    const char* v = env("XQAJIT_LOG_LEVEL");
    const auto lvl = v ? spdlog::level::from_str(v) : spdlog::level::warn;
    log->set_level(lvl);
  });
  return log;
}

}  // namespace detail
}  // namespace xqajit
