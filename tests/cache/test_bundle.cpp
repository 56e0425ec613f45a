// Bundles: writer/reader round trip, every corruption the reader must refuse,
// the search path, the golden format file, and the CLI (pack -> list -> verify
// -> unpack; the engine serving from a bundle with NVRTC hidden).

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <iterator>
#include <random>


#include "support/process.hpp"
#include "support/temp_dir.hpp"
#include "xqajit/cache/bundle.hpp"
#include "xqajit/detail/sha256.hpp"
#include "xqajit/error.hpp"

namespace fs = std::filesystem;
using namespace xqajit;

namespace {

using xqajit::test::TempDir;

std::vector<char> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

std::vector<char> pattern(std::size_t n, int seed) {
  std::vector<char> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<char>((i * 7 + seed) % 251);
  return v;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

const char* kNameA = "gqa_fp16_kvfp16_ofp16_d128_p64_g1_q1_sw0_t64_sm90a";  // a pre-backend name: any string pins the format
const char* kNameB = "gqa_bf16_kvfp8_obf16_d64_p16_g8_q1_sw0_t64_sm120a";
const char* kFingerprint = "v1-nvrtc13.0-t0123456789abcdef";

/// The golden bundle's fixed inputs: two entries, the second larger than the
/// 256-byte alignment so padding between cubins is pinned too.
BundleWriter tiny_writer() {
  BundleWriter w;
  w.add({kNameA, "sm_90a", kFingerprint, 0, 0, {}}, bytes_of("\x7f"
                                                             "ELF tiny cubin A"));
  w.add({kNameB, "sm_120a", "v1-nvrtc12.8-tfedcba9876543210", 0, 0, {}}, pattern(300, 3));
  return w;
}

std::uint64_t get_u64(const std::string& b, std::size_t at) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[at + i]);
  return v;
}
void put_u64(std::string& b, std::size_t at, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) b[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
// After patching the index, re-seal its checksum so the deeper checks are reached.
void reseal_index(std::string& b) {
  const auto off = get_u64(b, 16), size = get_u64(b, 24);
  const std::string sha = detail::sha256_hex(b.data() + off, size);
  b.replace(32, 64, sha);
}

/// Opens `bytes` as a bundle and returns the BundleError's message ("" if none).
std::string open_error(const TempDir& dir, const std::string& bytes, bool verify = true) {
  const fs::path file = dir.path() / "corrupt.xqab";
  write_file(file, bytes);
  try {
    auto reader = BundleReader::open(file);
    if (verify) reader.verify();
  } catch (const BundleError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("writer and reader round trip", "[bundle]") {
  TempDir dir;
  const fs::path file = dir.path() / "two.xqab";
  BundleWriter writer = tiny_writer();
  REQUIRE(writer.size() == 2);
  writer.write(file);
  // Atomic write: no temp files left beside it.
  CHECK(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()) == 1);

  const BundleReader reader = BundleReader::open(file);
  CHECK(reader.path() == file);
  REQUIRE(reader.entries().size() == 2);
  const BundleEntry* a = reader.find(kNameA);
  REQUIRE(a);
  CHECK(a->arch == "sm_90a");
  CHECK(a->fingerprint == kFingerprint);
  CHECK(a->offset % 256 == 0);
  CHECK(reader.read(*a) == bytes_of("\x7f"
                                    "ELF tiny cubin A"));
  const BundleEntry* b = reader.find(kNameB);
  REQUIRE(b);
  CHECK(b->offset % 256 == 0);
  CHECK(b->sha256 == detail::sha256_hex(pattern(300, 3).data(), 300));
  CHECK(reader.read(*b) == pattern(300, 3));
  CHECK(reader.find("gqa_nothing") == nullptr);
  CHECK_NOTHROW(reader.verify());

  // An empty bundle is valid; rewriting replaces the file.
  BundleWriter().write(file);
  CHECK(BundleReader::open(file).entries().empty());
}

TEST_CASE("the writer refuses entries it could not read back", "[bundle]") {
  BundleWriter w;
  CHECK_THROWS_AS(w.add({"", "sm_90a", kFingerprint, 0, 0, {}}, bytes_of("x")), BundleError);
  CHECK_THROWS_AS(w.add({kNameA, "", kFingerprint, 0, 0, {}}, bytes_of("x")), BundleError);
  CHECK_THROWS_AS(w.add({kNameA, "sm_90a", "", 0, 0, {}}, bytes_of("x")), BundleError);
  // A cubin that does not match the checksum it came with (a corrupt cache entry).
  CHECK_THROWS_WITH(w.add({kNameA, "sm_90a", kFingerprint, 0, 0, std::string(64, 'a')}, bytes_of("x")),
                    Catch::Contains(kNameA) && Catch::Contains("checksum"));
  w.add({kNameA, "sm_90a", kFingerprint, 0, 0, {}}, bytes_of("x"));
  CHECK_THROWS_WITH(w.add({kNameA, "sm_90a", kFingerprint, 0, 0, {}}, bytes_of("y")),
                    Catch::Contains("twice"));
  w.add({kNameA, "sm_90a", "v1-other-fingerprint", 0, 0, {}}, bytes_of("y"));  // another toolchain: fine
  CHECK(w.size() == 2);
  TempDir dir;
  CHECK_THROWS_WITH(w.write(dir.path() / "no" / "such" / "dir.xqab"), Catch::Contains("dir.xqab"));
}

TEST_CASE("every corruption is a BundleError naming the file and entry", "[bundle][corrupt]") {
  TempDir dir;
  const fs::path good_file = dir.path() / "good.xqab";
  tiny_writer().write(good_file);
  const std::string good = read_file(good_file);
  const BundleReader reader = BundleReader::open(good_file);
  const BundleEntry a = *reader.find(kNameA), b = *reader.find(kNameB);
  const std::string file = (dir.path() / "corrupt.xqab").string();
  REQUIRE(open_error(dir, good).empty());

  SECTION("truncated anywhere") {
    for (std::size_t len : {std::size_t{0}, std::size_t{7}, std::size_t{95}, std::size_t{200},
                            static_cast<std::size_t>(b.offset + 10), good.size() - 1}) {
      INFO("length " << len);
      const std::string message = open_error(dir, good.substr(0, len));
      CHECK_THAT(message, Catch::Contains(file));
    }
    CHECK_THAT(open_error(dir, good.substr(0, 50)), Catch::Contains("truncated"));
  }
  SECTION("a flipped cubin byte is caught on read, naming the entry") {
    std::string bad = good;
    bad[b.offset + 17] ^= 0x01;
    const fs::path bad_file = dir.path() / "corrupt.xqab";
    write_file(bad_file, bad);
    const BundleReader r = BundleReader::open(bad_file);  // header and index are fine
    CHECK(r.read(*r.find(kNameA)) == bytes_of("\x7f"
                                              "ELF tiny cubin A"));
    CHECK_THROWS_WITH(r.read(*r.find(kNameB)),
                      Catch::Contains(file) && Catch::Contains(kNameB) && Catch::Contains("checksum"));
    CHECK_THROWS_WITH(r.verify(), Catch::Contains(kNameB));
  }
  SECTION("wrong magic") {
    std::string bad = good;
    bad[3] = 'X';
    CHECK_THAT(open_error(dir, bad), Catch::Contains(file) && Catch::Contains("magic"));
    CHECK_THAT(open_error(dir, std::string(4096, '\0')), Catch::Contains("magic"));
  }
  SECTION("newer or zero format version") {
    std::string bad = good;
    bad[8] = static_cast<char>(kBundleFormatVersion + 1);
    CHECK_THAT(open_error(dir, bad),
               Catch::Contains(file) && Catch::Contains("newer") && Catch::Contains("version 2"));
    bad[8] = 0;
    CHECK_THAT(open_error(dir, bad), Catch::Contains("version 0"));
  }
  SECTION("index past the end, or overflowing") {
    std::string bad = good;
    put_u64(bad, 16, good.size() + 1);
    CHECK_THAT(open_error(dir, bad), Catch::Contains(file) && Catch::Contains("outside the file"));
    bad = good;
    put_u64(bad, 24, ~std::uint64_t{0} - 10);  // offset + size wraps around
    CHECK_THAT(open_error(dir, bad), Catch::Contains("outside the file"));
    bad = good;
    put_u64(bad, 16, 3);  // inside the header
    CHECK_THAT(open_error(dir, bad), Catch::Contains("outside the file"));
  }
  SECTION("an index byte changed without resealing") {
    std::string bad = good;
    bad[get_u64(good, 16) + 3] ^= 0x40;
    CHECK_THAT(open_error(dir, bad), Catch::Contains("index checksum"));
  }
  SECTION("an entry's cubin pointing past the end (index resealed)") {
    const std::size_t index = get_u64(good, 16);
    std::string bad = good;
    put_u64(bad, index, good.size() + 100);  // first entry's offset
    reseal_index(bad);
    CHECK_THAT(open_error(dir, bad),
               Catch::Contains(file) && Catch::Contains(kNameA) && Catch::Contains("outside the data area"));
    bad = good;
    put_u64(bad, index + 8, ~std::uint64_t{0});  // first entry's size: offset + size overflows
    reseal_index(bad);
    CHECK_THAT(open_error(dir, bad), Catch::Contains(kNameA));
  }
  SECTION("an entry count larger than the index holds") {
    std::string bad = good;
    bad[12] = 100;
    CHECK_THAT(open_error(dir, bad), Catch::Contains("100 entries"));
    bad = good;
    bad[12] = 1;  // fewer entries than the index holds: stray bytes
    CHECK_THAT(open_error(dir, bad), Catch::Contains("stray"));
  }
  SECTION("a string length running past the index (resealed)") {
    std::string bad = good;
    const std::size_t index = get_u64(good, 16);
    bad[index + 8 + 8 + 64] = static_cast<char>(0xff);  // name length of entry 0
    bad[index + 8 + 8 + 64 + 1] = static_cast<char>(0xff);
    reseal_index(bad);
    CHECK_THAT(open_error(dir, bad), Catch::Contains("entry #0") && Catch::Contains("past the end"));
  }
  SECTION("a caller's entry pointing outside the file is refused on read") {
    BundleEntry forged = a;
    forged.offset = ~std::uint64_t{0} - 4;
    CHECK_THROWS_AS(reader.read(forged), BundleError);
  }
  SECTION("not a file") {
    CHECK_THROWS_WITH(BundleReader::open(dir.path()), Catch::Contains("regular file"));
    CHECK_THROWS_WITH(BundleReader::open(dir.path() / "missing.xqab"), Catch::Contains("missing.xqab"));
  }
}

TEST_CASE("a bundle set skips bad bundles and entries and serves from good ones", "[bundle][set]") {
  TempDir dir;
  const fs::path folder = dir.path() / "bundles";
  fs::create_directories(folder);
  write_file(folder / "0-garbage.xqab", "this is not a bundle");
  write_file(folder / "ignored.txt", "not a bundle either, and not *.xqab");
  // 1-corrupt: a valid index whose entry A has a flipped cubin byte.
  tiny_writer().write(folder / "1-corrupt.xqab");
  {
    std::string bytes = read_file(folder / "1-corrupt.xqab");
    bytes[BundleReader::open(folder / "1-corrupt.xqab").find(kNameA)->offset] ^= 0x20;
    write_file(folder / "1-corrupt.xqab", bytes);
  }
  // 2-good: entry A intact.
  tiny_writer().write(folder / "2-good.xqab");
  // A separate file with entry A built from other templates.
  BundleWriter other;
  other.add({kNameA, "sm_90a", "v1-nvrtc13.0-tffffffffffffffff", 0, 0, {}}, bytes_of("other templates"));
  other.write(dir.path() / "other.xqab");

  const BundleSet set({dir.path() / "other.xqab", folder, dir.path() / "missing.xqab", ""});
  CHECK(set.size() == 3);  // other, 1-corrupt, 2-good; the garbage and the missing one skipped

  const auto hit = set.find(kNameA, "-t0123456789abcdef");
  REQUIRE(hit);
  CHECK(hit->file == folder / "2-good.xqab");  // 1-corrupt's copy failed its checksum
  CHECK(hit->cubin == bytes_of("\x7f"
                               "ELF tiny cubin A"));
  CHECK(hit->entry.fingerprint == kFingerprint);

  const auto other_hit = set.find(kNameA, "-tffffffffffffffff");
  REQUIRE(other_hit);
  CHECK(other_hit->cubin == bytes_of("other templates"));
  CHECK_FALSE(set.find(kNameA, "-t1111111111111111"));
  CHECK_FALSE(set.find("gqa_missing", ""));
  CHECK(BundleSet({}).size() == 0);
}

TEST_CASE("golden file pins the format", "[bundle][golden]") {
  const fs::path golden = fs::path(XQAJIT_SOURCE_DIR) / "tests" / "golden" / "tiny.xqab";
  // Regenerate (only after a deliberate format change, with kBundleFormatVersion bumped):
  //   XQAJIT_REGENERATE_GOLDEN=1 ./test_bundle "[golden]"
  if (std::getenv("XQAJIT_REGENERATE_GOLDEN")) {
    tiny_writer().write(golden);
    WARN("regenerated " << golden);
  }
  TempDir dir;
  tiny_writer().write(dir.path() / "tiny.xqab");
  REQUIRE(fs::exists(golden));
  CHECK(read_file(dir.path() / "tiny.xqab") == read_file(golden));

  // And this reader reads the golden file.
  const BundleReader reader = BundleReader::open(golden);
  REQUIRE(reader.entries().size() == 2);
  CHECK(reader.entries()[0].name == kNameA);
  CHECK(reader.entries()[0].offset == 256);
  CHECK(reader.entries()[1].offset == 512);
  CHECK(reader.read(reader.entries()[1]) == pattern(300, 3));
}

// ---- through the CLI ---------------------------------------------------------

namespace {


}  // namespace
