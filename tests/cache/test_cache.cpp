// The disk cache: round trips, every kind of broken entry, fingerprints, unwritable
// roots and failed writes. Locks and racing writers: test_cache_locks.cpp; eviction:
// test_cache_eviction.cpp.

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
