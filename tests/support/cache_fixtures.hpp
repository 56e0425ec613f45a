#pragma once
// What the disk cache's tests share (test_cache, test_cache_locks, test_cache_eviction):
// fingerprints and a name, a temp root that survives chmod, fake cubins, file helpers,
// the library's warnings captured, and forked children that never return into Catch.

#include <signal.h>
#include <spdlog/sinks/ostream_sink.h>
#include <sys/wait.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "util/fs.hpp"
#include "util/log.hpp"
#include "xqajit/cache/cache.hpp"

namespace xqajit::test::cache {

namespace fs = std::filesystem;

inline const std::string kFingerprint = toolchain_fingerprint("13.0", std::string(64, 'a'));
inline const std::string kOtherFingerprint = toolchain_fingerprint("12.8", std::string(64, 'b'));
inline const std::string kName = "gqa_in-fp16_kv-fp16_out-fp16_d128_p64_g8_q1_sw0_sm_90a";

class TempDir {
 public:
  TempDir() : path_(fs::temp_directory_path() / ("xqajit-test-cache-" + detail::unique_suffix())) {
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(path_, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
      fs::permissions(it->path(), fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

inline std::vector<char> fake_cubin(std::size_t size, int seed) {
  std::vector<char> bytes(size);
  for (std::size_t i = 0; i < size; ++i) bytes[i] = static_cast<char>((i * 131 + seed * 7919) >> 3);
  return bytes;
}

inline std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

inline std::vector<std::string> files_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& item : fs::directory_iterator(dir)) names.push_back(item.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

inline void age(const fs::path& path, std::chrono::seconds by) {
  fs::last_write_time(path, fs::file_time_type::clock::now() - by);
}

// Captures the warnings the library logs while alive.
class WarningCapture {
 public:
  WarningCapture() : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(stream_)) {
    sink_->set_pattern("%l|%v");
    saved_level_ = detail::logger()->level();
    detail::logger()->set_level(spdlog::level::warn);
    detail::logger()->sinks().push_back(sink_);
  }
  ~WarningCapture() {
    auto& sinks = detail::logger()->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
    detail::logger()->set_level(saved_level_);
  }
  int count() const {
    std::istringstream lines(stream_.str());
    int n = 0;
    for (std::string line; std::getline(lines, line);) n += line.rfind("warning|", 0) == 0;
    return n;
  }
  std::string text() const { return stream_.str(); }

 private:
  std::ostringstream stream_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
  spdlog::level::level_enum saved_level_;
};

inline int wait_for(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Forks; the child runs `body` and exits with its result, never returning into Catch.
inline pid_t spawn(const std::function<int()>& body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    int code = 98;
    try {
      code = body();
    } catch (...) {
      code = 99;
    }
    ::_exit(code);
  }
  REQUIRE(pid > 0);
  return pid;
}

inline int run_in_child(const std::function<int()>& body) { return wait_for(spawn(body)); }

}  // namespace xqajit::test::cache
