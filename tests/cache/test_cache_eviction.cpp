// The disk cache's eviction: gc to a size bound (least recently used first, other
// fingerprints before ours, stale leftovers only) and clear.

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
