// The disk cache: round trips, every kind of broken entry, unwritable roots,
// cross-process and cross-thread exclusion, racing publishers, LRU eviction.

#include <fcntl.h>
#include <signal.h>
#include <spdlog/sinks/ostream_sink.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "util/fs.hpp"
#include "util/log.hpp"
#include "xqajit/cache/cache.hpp"
#include "xqajit/detail/sha256.hpp"
#include "xqajit/error.hpp"

namespace fs = std::filesystem;
using namespace xqajit;

namespace {

const std::string kFingerprint = toolchain_fingerprint("13.0", std::string(64, 'a'));
const std::string kOtherFingerprint = toolchain_fingerprint("12.8", std::string(64, 'b'));
const std::string kName = "gqa_in-fp16_kv-fp16_out-fp16_d128_p64_g8_q1_sw0_sm_90a";

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

std::vector<char> fake_cubin(std::size_t size, int seed) {
  std::vector<char> bytes(size);
  for (std::size_t i = 0; i < size; ++i) bytes[i] = static_cast<char>((i * 131 + seed * 7919) >> 3);
  return bytes;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

std::vector<std::string> files_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& item : fs::directory_iterator(dir)) names.push_back(item.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

void age(const fs::path& path, std::chrono::seconds by) {
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

int wait_for(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Forks; the child runs `body` and exits with its result, never returning into Catch.
pid_t spawn(const std::function<int()>& body) {
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

int run_in_child(const std::function<int()>& body) { return wait_for(spawn(body)); }

}  // namespace

TEST_CASE("toolchain_fingerprint names format, toolchain and templates", "[cache]") {
  CHECK(toolchain_fingerprint("13.0", "0123456789abcdef0123456789abcdef") ==
        "v1-nvrtc13.0-t0123456789abcdef");
}

TEST_CASE("publish then load round-trips the cubin and writes a manifest", "[cache]") {
  TempDir tmp;
  DiskCache cache(tmp.path(), kFingerprint);
  REQUIRE(cache.writable());
  const auto cubin = fake_cubin(5000, 1);
  WarningCapture warnings;

  CHECK_FALSE(cache.load(kName));  // a plain miss is quiet
  const auto dir = cache.publish(kName, cubin, R"({"flags": ["-DHEAD_ELEMS=128"]})");
  REQUIRE(dir);
  CHECK(*dir == tmp.path() / kFingerprint / kName);
  CHECK(*dir == cache.entry_dir(kName));
  CHECK(files_in(*dir) == std::vector<std::string>{"kernel.cubin", "manifest.json"});  // no temp files left

  const auto manifest = nlohmann::json::parse(read_text(*dir / "manifest.json"));
  CHECK(manifest.at("format_version") == kCacheFormatVersion);
  CHECK(manifest.at("name") == kName);
  CHECK(manifest.at("fingerprint") == kFingerprint);
  CHECK(manifest.at("cubin_bytes") == cubin.size());
  CHECK(manifest.at("sha256") == detail::sha256_hex(cubin.data(), cubin.size()));
  CHECK(manifest.at("created").is_string());
  CHECK(manifest.at("meta").at("flags").at(0) == "-DHEAD_ELEMS=128");

  const auto loaded = cache.load(kName);
  REQUIRE(loaded);
  CHECK(*loaded == cubin);
  const auto entries = cache.list(false);
  REQUIRE(entries.size() == 1);
  CHECK(entries[0].name == kName);
  CHECK(entries[0].fingerprint == kFingerprint);
  CHECK(entries[0].sha256 == manifest.at("sha256"));
  CHECK(entries[0].bytes == cubin.size() + fs::file_size(*dir / "manifest.json"));
  CHECK(cache.size_bytes() == entries[0].bytes);
  CHECK(warnings.count() == 0);

  // A second cache object over the same root sees the entry (another process would too).
  CHECK(DiskCache(tmp.path(), kFingerprint).load(kName) == cubin);
}

TEST_CASE("republishing replaces an entry with the new bytes", "[cache]") {
  TempDir tmp;
  DiskCache cache(tmp.path(), kFingerprint);
  REQUIRE(cache.publish(kName, fake_cubin(100, 1)));
  REQUIRE(cache.publish(kName, fake_cubin(100, 1)));  // same bytes: kept
  REQUIRE(cache.publish(kName, fake_cubin(300, 2)));
  CHECK(cache.load(kName) == fake_cubin(300, 2));
  CHECK(files_in(cache.entry_dir(kName)) == std::vector<std::string>{"kernel.cubin", "manifest.json"});
}

TEST_CASE("a broken entry is a miss, is removed, and can be rebuilt", "[cache]") {
  TempDir tmp;
  DiskCache cache(tmp.path(), kFingerprint);
  const auto cubin = fake_cubin(4096, 3);
  const fs::path dir = cache.entry_dir(kName);
  REQUIRE(cache.publish(kName, cubin));

  std::function<void()> damage;
  SECTION("one flipped byte in the cubin") {
    damage = [&] {
      auto bytes = cubin;
      bytes[1234] ^= 0x40;
      write_text(dir / "kernel.cubin", std::string(bytes.begin(), bytes.end()));
    };
  }
  SECTION("a truncated cubin") {
    damage = [&] { fs::resize_file(dir / "kernel.cubin", 1000); };
  }
  SECTION("a missing cubin") {
    damage = [&] { fs::remove(dir / "kernel.cubin"); };
  }
  SECTION("a garbled manifest") {
    damage = [&] { write_text(dir / "manifest.json", "{\"format_version\": 1, \"na"); };
  }
  SECTION("a manifest of another format version") {
    damage = [&] {
      auto manifest = nlohmann::json::parse(read_text(dir / "manifest.json"));
      manifest["format_version"] = kCacheFormatVersion + 1;
      write_text(dir / "manifest.json", manifest.dump());
    };
  }
  SECTION("a manifest that describes another entry") {
    damage = [&] {
      auto manifest = nlohmann::json::parse(read_text(dir / "manifest.json"));
      manifest["name"] = "something_else";
      write_text(dir / "manifest.json", manifest.dump());
    };
  }
  SECTION("a missing manifest (half-written entry)") {
    damage = [&] { fs::remove(dir / "manifest.json"); };
  }

  damage();
  WarningCapture warnings;
  CHECK_FALSE(cache.load(kName));
  CHECK(warnings.count() == 1);
  CHECK_FALSE(fs::exists(dir));
  CHECK(cache.list().empty());
  CHECK_FALSE(cache.load(kName));  // now a plain miss
  CHECK(warnings.count() == 1);

  REQUIRE(cache.publish(kName, cubin));
  CHECK(cache.load(kName) == cubin);
}

TEST_CASE("a half entry under someone's lock is a quiet miss and is left alone", "[cache]") {
  TempDir tmp;
  DiskCache cache(tmp.path(), kFingerprint);
  const auto cubin = fake_cubin(2048, 4);
  REQUIRE(cache.publish(kName, cubin));
  fs::remove(cache.entry_dir(kName) / "manifest.json");

  WarningCapture warnings;
  EntryLock lock = cache.lock(kName);  // as a publisher mid-write would hold it
  REQUIRE(lock.held());
  CHECK_FALSE(cache.load(kName));
  CHECK(warnings.count() == 0);
  CHECK(fs::exists(cache.entry_dir(kName) / "kernel.cubin"));
  // The lock holder publishes over the half entry.
  REQUIRE(cache.publish(kName, cubin));
  CHECK(cache.load(kName) == cubin);
}

TEST_CASE("fingerprints keep entries of different toolchains apart", "[cache]") {
  TempDir tmp;
  DiskCache ours(tmp.path(), kFingerprint);
  DiskCache theirs(tmp.path(), kOtherFingerprint);
  REQUIRE(theirs.publish(kName, fake_cubin(100, 5)));
  CHECK_FALSE(ours.load(kName));
  REQUIRE(ours.publish(kName, fake_cubin(200, 6)));
  CHECK(ours.load(kName) == fake_cubin(200, 6));
  CHECK(theirs.load(kName) == fake_cubin(100, 5));
  CHECK(ours.list(true).size() == 2);
  REQUIRE(ours.list(false).size() == 1);
  CHECK(ours.list(false)[0].fingerprint == kFingerprint);
}

TEST_CASE("programmer errors raise CacheError; I/O trouble never does", "[cache]") {
  TempDir tmp;
  DiskCache cache(tmp.path(), kFingerprint);
  for (const std::string& bad :
       std::vector<std::string>{"", "a/b", "..", ".hidden", "x.lock", std::string(300, 'n')}) {
    CHECK_THROWS_AS(cache.entry_dir(bad), CacheError);
    CHECK_THROWS_AS(cache.load(bad), CacheError);
    CHECK_THROWS_AS(cache.publish(bad, fake_cubin(10, 0)), CacheError);
    CHECK_THROWS_AS(cache.lock(bad), CacheError);
  }
  CHECK_THROWS_AS(cache.publish(kName, fake_cubin(10, 0), "{not json"), CacheError);
  CHECK_THROWS_AS(DiskCache(tmp.path(), ""), CacheError);
  CHECK_THROWS_AS(DiskCache(tmp.path(), "a/b"), CacheError);
}

TEST_CASE("an unwritable root degrades to a read-only cache with one warning", "[cache]") {
  TempDir tmp;
  SECTION("a root under a regular file (fails even for root)") {
    write_text(tmp.path() / "afile", "not a directory");
    WarningCapture warnings;
    DiskCache cache(tmp.path() / "afile" / "cache", kFingerprint);
    CHECK_FALSE(cache.writable());
    CHECK_FALSE(cache.publish(kName, fake_cubin(100, 7)));
    CHECK_FALSE(cache.publish(kName, fake_cubin(100, 7)));
    CHECK_FALSE(cache.load(kName));
    CHECK_FALSE(cache.lock(kName).held());
    CHECK(cache.list().empty());
    CHECK(cache.size_bytes() == 0);
    CHECK(cache.gc(0) == 0);
    CHECK(cache.clear() == 0);
    CHECK(warnings.count() == 1);
    CHECK(warnings.text().find("XQAJIT_CACHE_DIR") != std::string::npos);
  }
  SECTION("a read-only directory that already holds entries") {
    const auto cubin = fake_cubin(700, 8);
    REQUIRE(DiskCache(tmp.path(), kFingerprint).publish(kName, cubin));
    const fs::path fingerprint_dir = tmp.path() / kFingerprint;
    for (const fs::path& dir : {tmp.path(), fingerprint_dir, fingerprint_dir / kName})
      fs::permissions(dir, fs::perms::owner_write | fs::perms::group_write | fs::perms::others_write,
                      fs::perm_options::remove);
    if (::access(fingerprint_dir.c_str(), W_OK) == 0) {
      WARN("running as root: chmod cannot make a directory read-only; read-only section skipped");
      return;
    }
    WarningCapture warnings;
    DiskCache cache(tmp.path(), kFingerprint);
    CHECK_FALSE(cache.writable());
    CHECK(cache.load(kName) == cubin);  // existing entries still serve
    CHECK_FALSE(cache.publish("other_name", cubin));
    CHECK_FALSE(cache.lock(kName).held());
    CHECK(warnings.count() == 1);
  }
}

TEST_CASE("a failed write (full disk) fails that publish cleanly", "[cache]") {
  TempDir tmp;
  // RLIMIT_FSIZE makes write() fail with EFBIG past 1 KiB: a full disk, as far as publish can tell.
  const int code = run_in_child([&] {
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{1024, 1024};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    DiskCache cache(tmp.path(), kFingerprint);
    if (!cache.writable()) return 10;
    if (cache.publish(kName, fake_cubin(64 * 1024, 9))) return 11;
    if (!cache.publish("small_kernel", fake_cubin(100, 9))) return 12;  // later publishes still work
    return 0;
  });
  CHECK(code == 0);
  DiskCache cache(tmp.path(), kFingerprint);
  CHECK_FALSE(fs::exists(cache.entry_dir(kName)));
  CHECK_FALSE(cache.load(kName));
  for (const auto& name : files_in(tmp.path() / kFingerprint)) CHECK_FALSE(detail::is_temp_file_name(name));
  CHECK(cache.load("small_kernel") == fake_cubin(100, 9));
}

TEST_CASE("the entry lock excludes other processes and dies with its holder", "[cache]") {
  TempDir tmp;
  DiskCache cache(tmp.path(), kFingerprint);
  const fs::path lock_path = cache.entry_dir(kName).string() + ".lock";
  auto try_lock_in_child = [&] {
    return run_in_child([&] {
      std::error_code ec;
      return detail::lock_file(lock_path, detail::LockWait::kTry, ec).valid() ? 0 : 1;
    });
  };
  {
    EntryLock lock = cache.lock(kName);
    REQUIRE(lock.held());
    CHECK(fs::exists(lock_path));
    CHECK(try_lock_in_child() == 1);
    EntryLock moved = std::move(lock);
    CHECK_FALSE(lock.held());
    CHECK(try_lock_in_child() == 1);  // still held through the moved-to object
  }
  CHECK(try_lock_in_child() == 0);

  // A holder killed with SIGKILL leaves no stale lock behind.
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t holder = spawn([&] {
    EntryLock lock = DiskCache(tmp.path(), kFingerprint).lock(kName);
    if (::write(ready[1], "x", 1) != 1) return 1;
    ::pause();
    return 0;
  });
  char byte;
  REQUIRE(::read(ready[0], &byte, 1) == 1);
  CHECK(try_lock_in_child() == 1);
  ::kill(holder, SIGKILL);
  CHECK(wait_for(holder) == 128 + SIGKILL);
  ::close(ready[0]);
  ::close(ready[1]);
  CHECK(try_lock_in_child() == 0);
  CHECK(cache.lock(kName).held());
}

TEST_CASE("a waiter retakes the lock when its lock file was replaced", "[cache]") {
  TempDir tmp;
  DiskCache cache(tmp.path(), kFingerprint);
  const fs::path lock_path = cache.entry_dir(kName).string() + ".lock";
  std::error_code ec;
  detail::UniqueFd old_file = detail::lock_file(lock_path, detail::LockWait::kTry, ec);
  REQUIRE(old_file.valid());
  const pid_t waiter = spawn([&] {
    old_file.reset();  // a forked child shares the parent's lock until it closes its copy
    return DiskCache(tmp.path(), kFingerprint).lock(kName).held() ? 0 : 1;
  });
  ::usleep(100000);  // let the waiter block on the old file (if it is late, it blocks on the new one)
  // What eviction does: unlink the lock file while holding it; a new file takes its place.
  REQUIRE(::unlink(lock_path.c_str()) == 0);
  detail::UniqueFd new_file = detail::lock_file(lock_path, detail::LockWait::kTry, ec);
  REQUIRE(new_file.valid());
  old_file.reset();
  // The waiter now holds the unlinked file's lock, which must not count: it has to wait for ours.
  ::usleep(100000);
  int status = 0;
  CHECK(::waitpid(waiter, &status, WNOHANG) == 0);
  new_file.reset();
  CHECK(wait_for(waiter) == 0);
}

TEST_CASE("processes racing for one missing entry compile it once", "[cache][concurrency]") {
  TempDir tmp;
  const fs::path marker = tmp.path() / "compiled.txt";
  constexpr int kProcesses = 6;
  int gate[2];
  REQUIRE(::pipe(gate) == 0);
  std::vector<pid_t> children;
  for (int i = 0; i < kProcesses; ++i) {
    children.push_back(spawn([&, i] {
      ::close(gate[1]);
      char byte;
      if (::read(gate[0], &byte, 1) != 0) return 20;  // released together when the parent closes the pipe
      DiskCache cache(tmp.path(), kFingerprint);
      {
        EntryLock lock = cache.lock(kName);
        if (!lock.held()) return 21;
        if (!cache.load(kName)) {
          const int fd = ::open(marker.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
          const std::string line = std::to_string(::getpid()) + "\n";
          if (fd < 0 || ::write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) return 22;
          ::close(fd);
          ::usleep(20000);  // a slow compile widens the window for a second compiler
          if (!cache.publish(kName, fake_cubin(3000, ::getpid()))) return 23;
        }
      }
      const auto loaded = cache.load(kName);
      if (!loaded) return 24;
      write_text(tmp.path() / ("result." + std::to_string(i)),
                 detail::sha256_hex(loaded->data(), loaded->size()));
      return 0;
    }));
  }
  ::close(gate[0]);
  ::close(gate[1]);
  for (pid_t child : children) CHECK(wait_for(child) == 0);

  const std::string compiled = read_text(marker);
  CHECK(std::count(compiled.begin(), compiled.end(), '\n') == 1);
  const auto entries = DiskCache(tmp.path(), kFingerprint).list();
  REQUIRE(entries.size() == 1);
  for (int i = 0; i < kProcesses; ++i)
    CHECK(read_text(tmp.path() / ("result." + std::to_string(i))) == entries[0].sha256);
}

TEST_CASE("threads racing for one missing entry compile it once", "[cache][concurrency]") {
  TempDir tmp;
  DiskCache cache(tmp.path(), kFingerprint);
  std::atomic<int> compiles{0};
  std::atomic<bool> go{false};
  std::vector<std::vector<char>> results(6);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < results.size(); ++i) {
    threads.emplace_back([&, i] {
      while (!go) std::this_thread::yield();
      DiskCache own(tmp.path(), kFingerprint);  // half the threads share one object, half have their own
      DiskCache& c = (i % 2) ? own : cache;
      {
        EntryLock lock = c.lock(kName);
        if (!c.load(kName)) {
          ++compiles;
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
          c.publish(kName, fake_cubin(3000, static_cast<int>(i) + 100));
        }
      }
      results[i] = c.load(kName).value_or(std::vector<char>{});
    });
  }
  go = true;
  for (auto& t : threads) t.join();
  CHECK(compiles == 1);
  for (const auto& result : results) {
    CHECK_FALSE(result.empty());
    CHECK(result == results[0]);
  }
}

TEST_CASE("publishers racing without the lock never leave a torn entry", "[cache][concurrency]") {
  TempDir tmp;
  constexpr int kPublishers = 4;
  std::set<std::vector<char>> candidates;
  for (int i = 0; i < kPublishers; ++i) candidates.insert(fake_cubin(2000 + 1000 * i, i));
  std::atomic<bool> publishing{true}, saw_foreign_bytes{false};
  std::vector<std::thread> threads;
  for (int i = 0; i < kPublishers; ++i) {
    threads.emplace_back([&, i] {
      DiskCache cache(tmp.path(), kFingerprint);
      for (int round = 0; round < 20; ++round) cache.publish(kName, fake_cubin(2000 + 1000 * i, i));
    });
  }
  std::thread reader([&] {
    DiskCache cache(tmp.path(), kFingerprint);
    while (publishing) {
      const auto loaded = cache.load(kName);  // may miss mid-race, but never returns mixed bytes
      if (loaded && !candidates.count(*loaded)) saw_foreign_bytes = true;
    }
  });
  for (auto& t : threads) t.join();
  publishing = false;
  reader.join();
  CHECK_FALSE(saw_foreign_bytes);
  // Without readers removing things, the last publisher always leaves a complete entry.
  DiskCache cache(tmp.path(), kFingerprint);
  REQUIRE(cache.publish(kName, fake_cubin(2000, 0)));
  std::vector<std::thread> final_round;
  for (int i = 0; i < kPublishers; ++i)
    final_round.emplace_back(
        [&, i] { DiskCache(tmp.path(), kFingerprint).publish(kName, fake_cubin(2000 + 1000 * i, i)); });
  for (auto& t : final_round) t.join();
  const auto loaded = cache.load(kName);
  REQUIRE(loaded);
  CHECK(candidates.count(*loaded) == 1);
}

TEST_CASE("gc evicts least recently used entries until the bound holds", "[cache][gc]") {
  TempDir tmp;
  DiskCache cache(tmp.path(), kFingerprint);
  for (const char* name : {"a", "b", "c"}) REQUIRE(cache.publish(name, fake_cubin(1000, 1)));
  age(cache.entry_dir("a") / "manifest.json", std::chrono::hours(3));
  age(cache.entry_dir("b") / "manifest.json", std::chrono::hours(2));
  age(cache.entry_dir("c") / "manifest.json", std::chrono::hours(1));
  const std::uint64_t entry_bytes = cache.size_bytes() / 3;
  REQUIRE(cache.size_bytes() == 3 * entry_bytes);

  CHECK(cache.gc(3 * entry_bytes) == 0);
  CHECK(cache.gc(2 * entry_bytes + entry_bytes / 2) == entry_bytes);
  CHECK_FALSE(fs::exists(cache.entry_dir("a")));
  CHECK_FALSE(fs::exists(cache.entry_dir("a").string() + ".lock"));
  REQUIRE(cache.load("b"));  // a hit makes b the most recently used
  CHECK(cache.gc(entry_bytes + entry_bytes / 2) == entry_bytes);
  CHECK_FALSE(fs::exists(cache.entry_dir("c")));
  CHECK(cache.load("b"));
  CHECK(cache.gc(0) == entry_bytes);
  CHECK(cache.size_bytes() == 0);
}

TEST_CASE("gc evicts other fingerprints before ours", "[cache][gc]") {
  TempDir tmp;
  DiskCache ours(tmp.path(), kFingerprint);
  DiskCache theirs(tmp.path(), kOtherFingerprint);
  REQUIRE(ours.publish(kName, fake_cubin(1000, 1)));
  REQUIRE(theirs.publish(kName, fake_cubin(1000, 1)));
  age(ours.entry_dir(kName) / "manifest.json", std::chrono::hours(5));  // ours is older, still kept
  const std::uint64_t total = ours.size_bytes();
  CHECK(ours.gc(total / 2 + 1) == total / 2);
  CHECK(ours.load(kName));
  CHECK_FALSE(theirs.load(kName));
  CHECK_FALSE(fs::exists(tmp.path() / kOtherFingerprint));  // its emptied directory goes too
}

TEST_CASE("gc removes stale leftovers but not fresh ones", "[cache][gc]") {
  TempDir tmp;
  DiskCache cache(tmp.path(), kFingerprint);
  REQUIRE(cache.publish("whole", fake_cubin(500, 1)));
  const fs::path fingerprint_dir = tmp.path() / kFingerprint;
  for (const char* name : {"stale_half", "fresh_half"}) {
    fs::create_directories(fingerprint_dir / name);
    write_text(fingerprint_dir / name / "kernel.cubin", "partial");
  }
  age(fingerprint_dir / "stale_half", std::chrono::minutes(5));
  const fs::path stale_temp = cache.entry_dir("whole") / ".kernel.cubin.tmp.123.abc";
  const fs::path fresh_temp = cache.entry_dir("whole") / ".manifest.json.tmp.456.def";
  write_text(stale_temp, "x");
  write_text(fresh_temp, "y");
  age(stale_temp, std::chrono::minutes(5));
  fs::create_directories(fingerprint_dir / ".trash.old.1.2");
  age(fingerprint_dir / ".trash.old.1.2", std::chrono::minutes(5));

  CHECK(cache.gc(1u << 30) == 0);
  CHECK_FALSE(fs::exists(fingerprint_dir / "stale_half"));
  CHECK(fs::exists(fingerprint_dir / "fresh_half"));
  CHECK_FALSE(fs::exists(stale_temp));
  CHECK(fs::exists(fresh_temp));
  CHECK_FALSE(fs::exists(fingerprint_dir / ".trash.old.1.2"));
  CHECK(cache.load("whole") == fake_cubin(500, 1));
}

TEST_CASE("clear removes every entry and nothing else", "[cache]") {
  TempDir tmp;
  write_text(tmp.path() / "README.md", "what this folder is\n");
  fs::create_directories(tmp.path() / "notes");
  write_text(tmp.path() / "notes" / "keep.txt", "mine");
  DiskCache ours(tmp.path(), kFingerprint);
  DiskCache theirs(tmp.path(), kOtherFingerprint);
  REQUIRE(ours.publish("a", fake_cubin(100, 1)));
  REQUIRE(ours.publish("b", fake_cubin(100, 2)));
  REQUIRE(theirs.publish("a", fake_cubin(100, 3)));
  ours.lock("a");  // leaves a lock file behind

  CHECK(ours.clear() == 3);
  CHECK(ours.list().empty());
  CHECK(ours.size_bytes() == 0);
  CHECK(read_text(tmp.path() / "README.md") == "what this folder is\n");
  CHECK(read_text(tmp.path() / "notes" / "keep.txt") == "mine");
  CHECK(files_in(tmp.path()) == std::vector<std::string>{"README.md", "notes"});
  // The cache still works after being cleared.
  REQUIRE(ours.publish("a", fake_cubin(100, 1)));
  CHECK(ours.load("a") == fake_cubin(100, 1));
}
