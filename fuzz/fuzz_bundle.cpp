// libFuzzer target for the bundle reader (run by scripts/fuzz_bundle.sh with
// ASan + UBSan). Any input must either open as a bundle whose every entry
// reads back with a matching checksum, or fail with a BundleError. A crash,
// a sanitizer report, a hang or any other exception type is a bug.

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "util/log.hpp"
#include "xqajit/cache/bundle.hpp"
#include "xqajit/detail/sha256.hpp"
#include "xqajit/error.hpp"

namespace xqajit::detail {
// The fuzzer links only bundle.cpp and sha256.cpp: no logger, so warnings are dropped.
std::shared_ptr<spdlog::logger> logger() { return nullptr; }
}  // namespace xqajit::detail

namespace {

/// The input as a file the reader can open and mmap (an anonymous memfd).
struct MemFile {
  int fd = -1;
  std::string path;
  MemFile(const std::uint8_t* data, std::size_t size) {
    fd = ::memfd_create("fuzz.xqab", MFD_CLOEXEC);
    if (fd < 0) std::abort();
    for (std::size_t done = 0; done < size;) {
      const ssize_t n = ::write(fd, data + done, size - done);
      if (n <= 0) std::abort();
      done += static_cast<std::size_t>(n);
    }
    path = "/proc/self/fd/" + std::to_string(fd);
  }
  ~MemFile() { ::close(fd); }
};

void check_one(const std::uint8_t* data, std::size_t size) {
  MemFile file(data, size);
  try {
    const auto reader = xqajit::BundleReader::open(file.path);
    for (const auto& entry : reader.entries()) {
      // Whatever the index says, a cubin handed out must match its checksum.
      try {
        const std::vector<char> cubin = reader.read(entry);
        if (xqajit::detail::sha256_hex(cubin.data(), cubin.size()) != entry.sha256) std::abort();
        if (cubin.size() != entry.size) std::abort();
      } catch (const xqajit::BundleError&) {
      }
      if (reader.find(entry.name) == nullptr) std::abort();
    }
  } catch (const xqajit::BundleError&) {
  }
  // The search path must skip a bad bundle, never throw.
  const xqajit::BundleSet set({file.path});
  (void)set.find("gqa_fp16_kvfp16_ofp16_d128_p64_g1_q1_sw0_t64_sm90a", "");
}

std::uint64_t le64(const std::uint8_t* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  check_one(data, size);
  // A mutation almost never keeps the index's SHA-256 right, so the index
  // parser behind it would go untested: also try the input with the checksum
  // recomputed, when the header's index range lies inside the input.
  constexpr std::size_t kHeader = 96;
  if (size < kHeader) return 0;
  const std::uint64_t offset = le64(data + 16), length = le64(data + 24);
  if (offset < kHeader || offset > size || length > size - offset) return 0;
  std::string resealed(reinterpret_cast<const char*>(data), size);
  resealed.replace(32, 64, xqajit::detail::sha256_hex(data + offset, length));
  check_one(reinterpret_cast<const std::uint8_t*>(resealed.data()), size);
  return 0;
}
