// The disk cache's exclusion: the entry lock across processes (and its holder's death),
// a replaced lock file, processes and threads racing for one missing entry, publishers
// racing without the lock.

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

#include "support/cache_fixtures.hpp"
#include "util/fs.hpp"
#include "util/log.hpp"
#include "xqajit/cache/cache.hpp"
#include "xqajit/detail/sha256.hpp"
#include "xqajit/error.hpp"

using namespace xqajit;
using namespace xqajit::test::cache;

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
