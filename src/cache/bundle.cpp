// Bundle reader and writer. The byte layout is documented in
// docs/BUNDLE_FORMAT.md and pinned by tests/golden/tiny.xqab.
//
// The reader trusts nothing in the file: every offset, size and count is checked
// against the mapped length (with overflow-safe arithmetic) before it is used,
// and a cubin is handed out only after its SHA-256 matches the index.

#include "xqajit/cache/bundle.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <set>

#include "util/log.hpp"
#include "xqajit/detail/sha256.hpp"
#include "xqajit/error.hpp"

namespace xqajit {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'X', 'Q', 'A', 'J', 'I', 'T', 'B', '\0'};
constexpr std::uint64_t kHeaderSize = 96;  // magic, version, count, index offset/size, index sha256
constexpr std::uint64_t kCubinAlignment = 256;
constexpr std::uint64_t kEntryFixedSize = 8 + 8 + 64 + 2 + 2 + 2 + 2;  // before the three strings
constexpr std::size_t kMaxString = 0xffff;

std::string sys_error() { return std::strerror(errno); }

// ---- little-endian encoding --------------------------------------------------

void put_u16(std::string& out, std::uint16_t v) {
  for (int i = 0; i < 2; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_u32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_u64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
std::uint64_t get_le(const unsigned char* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
std::uint64_t align_up(std::uint64_t v, std::uint64_t a) { return (v + a - 1) / a * a; }

bool is_lower_hex(const std::string& s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

/// Reads the index bytes one field at a time, never past its end.
class IndexCursor {
 public:
  IndexCursor(const unsigned char* data, std::uint64_t size, const fs::path& file)
      : data_(data), size_(size), file_(file) {}
  std::uint64_t u(int bytes, std::size_t entry) {
    need(bytes, entry);
    const std::uint64_t v = get_le(data_ + pos_, bytes);
    pos_ += bytes;
    return v;
  }
  std::string str(std::uint64_t len, std::size_t entry) {
    need(len, entry);
    std::string s(reinterpret_cast<const char*>(data_ + pos_), len);
    pos_ += len;
    return s;
  }
  std::uint64_t remaining() const { return size_ - pos_; }

 private:
  void need(std::uint64_t n, std::size_t entry) {
    if (n > size_ - pos_)
      throw BundleError(
          fmt::format("bundle {}: index entry #{} runs past the end of the index "
                      "({} bytes); the bundle is corrupt, re-create it",
                      file_.string(), entry, size_));
  }
  const unsigned char* data_;
  std::uint64_t size_, pos_ = 0;
  const fs::path& file_;
};

/// A read-only file descriptor, closed on scope exit.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

// ---- reader ------------------------------------------------------------------

struct BundleReader::Impl {
  fs::path path;
  std::vector<BundleEntry> entries;
  const unsigned char* data = nullptr;  // the whole file, mapped read-only
  std::uint64_t size = 0;
  ~Impl() {
    if (data) ::munmap(const_cast<unsigned char*>(data), size);
  }

  [[noreturn]] void fail(const std::string& what) const {
    throw BundleError(fmt::format("bundle {}: {}", path.string(), what));
  }
  void parse();
};

BundleReader::BundleReader() : impl_(std::make_unique<Impl>()) {}
BundleReader::BundleReader(BundleReader&&) noexcept = default;
BundleReader& BundleReader::operator=(BundleReader&&) noexcept = default;
BundleReader::~BundleReader() = default;

BundleReader BundleReader::open(const fs::path& file) {
  BundleReader reader;
  Impl& impl = *reader.impl_;
  impl.path = file;
  Fd fd{::open(file.c_str(), O_RDONLY | O_CLOEXEC)};
  if (fd.fd < 0) impl.fail("cannot open: " + sys_error());
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0) impl.fail("cannot stat: " + sys_error());
  if (!S_ISREG(st.st_mode)) impl.fail("not a regular file");
  if (static_cast<std::uint64_t>(st.st_size) < kHeaderSize)
    impl.fail(fmt::format("truncated: {} bytes, smaller than the {}-byte header", st.st_size, kHeaderSize));
  impl.size = static_cast<std::uint64_t>(st.st_size);
  // MAP_PRIVATE + PROT_READ works on read-only filesystems. Bundles are replaced
  // by rename, never rewritten in place, so the mapping does not shrink under us.
  void* map = ::mmap(nullptr, impl.size, PROT_READ, MAP_PRIVATE, fd.fd, 0);
  if (map == MAP_FAILED) impl.fail("cannot mmap: " + sys_error());
  impl.data = static_cast<const unsigned char*>(map);
  impl.parse();
  return reader;
}

void BundleReader::Impl::parse() {
  if (std::memcmp(data, kMagic, sizeof kMagic) != 0)
    fail("not an xqajit bundle (wrong magic; expected \"XQAJITB\\0\")");
  const auto version = static_cast<std::uint32_t>(get_le(data + 8, 4));
  if (version > kBundleFormatVersion)
    fail(
        fmt::format("format version {} is newer than this xqajit reads (up to {}); upgrade xqajit "
                    "or re-pack the bundle with this version",
                    version, kBundleFormatVersion));
  if (version == 0) fail("format version 0 is invalid; the header is corrupt");
  const std::uint64_t count = get_le(data + 12, 4);
  const std::uint64_t index_offset = get_le(data + 16, 8);
  const std::uint64_t index_size = get_le(data + 24, 8);
  const std::string index_sha(reinterpret_cast<const char*>(data + 32), 64);
  if (index_offset < kHeaderSize || index_offset > size || index_size > size - index_offset)
    fail(
        fmt::format("index (offset {}, {} bytes) lies outside the file ({} bytes); the file is "
                    "truncated or corrupt",
                    index_offset, index_size, size));
  if (count > index_size / kEntryFixedSize)
    fail(fmt::format("header claims {} entries but the index holds only {} bytes", count, index_size));
  if (detail::sha256_hex(data + index_offset, index_size) != index_sha)
    fail("index checksum mismatch; the index is corrupt, re-create the bundle");

  IndexCursor cur(data + index_offset, index_size, path);
  std::set<std::pair<std::string, std::string>> seen;
  entries.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    BundleEntry e;
    e.offset = cur.u(8, i);
    e.size = cur.u(8, i);
    e.sha256 = cur.str(64, i);
    const auto name_len = cur.u(2, i), arch_len = cur.u(2, i), fp_len = cur.u(2, i);
    if (cur.u(2, i) != 0) fail(fmt::format("index entry #{}: reserved field is not zero", i));
    e.name = cur.str(name_len, i);
    e.arch = cur.str(arch_len, i);
    e.fingerprint = cur.str(fp_len, i);
    const std::string who = e.name.empty() ? fmt::format("index entry #{}", i) : "entry " + e.name;
    if (e.name.empty() || e.arch.empty() || e.fingerprint.empty())
      fail(who + ": empty name, arch or fingerprint");
    if (!is_lower_hex(e.sha256)) fail(who + ": checksum is not a hex SHA-256");
    // The cubin must sit between the header and the index.
    if (e.offset < kHeaderSize || e.offset > index_offset || e.size > index_offset - e.offset)
      fail(fmt::format("{}: cubin (offset {}, {} bytes) lies outside the data area [{}, {})", who, e.offset,
                       e.size, kHeaderSize, index_offset));
    if (!seen.emplace(e.name, e.fingerprint).second)
      fail(who + ": listed twice for fingerprint " + e.fingerprint);
    entries.push_back(std::move(e));
  }
  if (cur.remaining() != 0) fail(fmt::format("{} stray bytes after the last index entry", cur.remaining()));
}

const fs::path& BundleReader::path() const { return impl_->path; }
const std::vector<BundleEntry>& BundleReader::entries() const { return impl_->entries; }

const BundleEntry* BundleReader::find(const std::string& name) const {
  for (const auto& e : impl_->entries)
    if (e.name == name) return &e;
  return nullptr;
}

std::vector<char> BundleReader::read(const BundleEntry& entry) const {
  const Impl& impl = *impl_;
  // The entry may be a caller's copy: check its bounds again.
  if (entry.offset > impl.size || entry.size > impl.size - entry.offset)
    impl.fail(fmt::format("entry {}: cubin (offset {}, {} bytes) lies past the end of the file", entry.name,
                          entry.offset, entry.size));
  const unsigned char* begin = impl.data + entry.offset;
  if (detail::sha256_hex(begin, entry.size) != entry.sha256)
    impl.fail(
        fmt::format("entry {}: cubin checksum mismatch (expected sha256 {}); the bundle is "
                    "corrupt, re-create it with `xqajit bundle pack`",
                    entry.name, entry.sha256));
  return std::vector<char>(begin, begin + entry.size);
}

void BundleReader::verify() const {
  for (const auto& e : impl_->entries) (void)read(e);
}

// ---- writer ------------------------------------------------------------------

void BundleWriter::add(BundleEntry entry, std::vector<char> cubin) {
  if (entry.name.empty() || entry.arch.empty() || entry.fingerprint.empty())
    throw BundleError("bundle entry needs a name, an arch and a fingerprint (got name '" + entry.name + "')");
  for (const std::string* s : {&entry.name, &entry.arch, &entry.fingerprint})
    if (s->size() > kMaxString)
      throw BundleError("bundle entry " + entry.name + ": a field is over 65535 bytes");
  const std::string actual = detail::sha256_hex(cubin.data(), cubin.size());
  if (!entry.sha256.empty() && entry.sha256 != actual)
    throw BundleError(
        fmt::format("bundle entry {}: cubin does not match its checksum {} (got {}); "
                    "the source is corrupt",
                    entry.name, entry.sha256, actual));
  for (const auto& [other, bytes] : entries_)
    if (other.name == entry.name && other.fingerprint == entry.fingerprint)
      throw BundleError(
          fmt::format("bundle entry {} added twice for fingerprint {}", entry.name, entry.fingerprint));
  entry.sha256 = actual;
  entry.offset = 0;
  entry.size = cubin.size();
  entries_.emplace_back(std::move(entry), std::move(cubin));
}

void BundleWriter::write(const fs::path& file) const {
  // Layout: header | cubins, each at a 256-byte boundary | index.
  std::string index;
  std::uint64_t offset = align_up(kHeaderSize, kCubinAlignment);
  std::vector<std::uint64_t> offsets;
  for (const auto& [e, cubin] : entries_) {
    offsets.push_back(offset);
    put_u64(index, offset);
    put_u64(index, cubin.size());
    index += e.sha256;
    put_u16(index, static_cast<std::uint16_t>(e.name.size()));
    put_u16(index, static_cast<std::uint16_t>(e.arch.size()));
    put_u16(index, static_cast<std::uint16_t>(e.fingerprint.size()));
    put_u16(index, 0);
    index += e.name + e.arch + e.fingerprint;
    offset = align_up(offset + cubin.size(), kCubinAlignment);
  }
  const std::uint64_t index_offset = offset;

  std::string header(kMagic, sizeof kMagic);
  put_u32(header, kBundleFormatVersion);
  put_u32(header, static_cast<std::uint32_t>(entries_.size()));
  put_u64(header, index_offset);
  put_u64(header, index.size());
  header += detail::sha256_hex(index.data(), index.size());

  std::string bytes(index_offset + index.size(), '\0');
  std::memcpy(bytes.data(), header.data(), header.size());
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    const auto& cubin = entries_[i].second;
    if (!cubin.empty()) std::memcpy(bytes.data() + offsets[i], cubin.data(), cubin.size());
  }
  std::memcpy(bytes.data() + index_offset, index.data(), index.size());

  // Atomic publish: a unique temp file in the same folder, fsync, rename, fsync
  // the folder. Readers see the old bundle or the new one, never half of one.
  static std::atomic<unsigned> counter{0};
  const fs::path dir = file.parent_path().empty() ? fs::path(".") : file.parent_path();
  const fs::path tmp = dir / fmt::format(".{}.tmp.{}.{}", file.filename().string(), ::getpid(), counter++);
  auto fail = [&](const std::string& what) {
    const std::string reason = sys_error();
    ::unlink(tmp.c_str());
    throw BundleError(fmt::format("bundle {}: cannot write ({}): {}", file.string(), what, reason));
  };
  {
    Fd fd{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644)};
    if (fd.fd < 0) fail("create " + tmp.string());
    const char* p = bytes.data();
    std::size_t left = bytes.size();
    while (left > 0) {
      const ssize_t n = ::write(fd.fd, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail("write");
      p += n;
      left -= static_cast<std::size_t>(n);
    }
    if (::fsync(fd.fd) != 0) fail("fsync");
  }
  if (::rename(tmp.c_str(), file.c_str()) != 0) fail("rename");
  Fd dir_fd{::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (dir_fd.fd >= 0) ::fsync(dir_fd.fd);  // best effort: the rename is durable once the folder is
}

// ---- search path -------------------------------------------------------------

BundleSet::BundleSet(const std::vector<fs::path>& files_or_dirs) {
  auto log = detail::logger();
  auto add = [&](const fs::path& file) {
    try {
      readers_.push_back(std::make_shared<BundleReader>(BundleReader::open(file)));
    } catch (const BundleError& e) {
      if (log) log->warn("skipping bundle: {}", e.what());
    }
  };
  for (const auto& path : files_or_dirs) {
    if (path.empty()) continue;
    std::error_code ec;
    if (fs::is_directory(path, ec)) {
      std::vector<fs::path> files;
      for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec))
        if (it->path().extension() == ".xqab") files.push_back(it->path());
      if (ec && log) log->warn("skipping bundle folder {}: {}", path.string(), ec.message());
      std::sort(files.begin(), files.end());  // a stable search order across hosts
      for (const auto& f : files) add(f);
    } else if (fs::exists(path, ec)) {
      add(path);
    } else if (log) {
      log->warn("skipping bundle {}: no such file or folder", path.string());
    }
  }
}

std::optional<BundleSet::Hit> BundleSet::find(const std::string& name,
                                              const std::string& fingerprint_suffix) const {
  for (const auto& reader : readers_) {
    for (const auto& entry : reader->entries()) {
      if (entry.name != name) continue;
      const auto& fp = entry.fingerprint;
      if (fp.size() < fingerprint_suffix.size() ||
          fp.compare(fp.size() - fingerprint_suffix.size(), fingerprint_suffix.size(), fingerprint_suffix) !=
              0)
        continue;
      try {
        return Hit{reader->read(entry), reader->path(), entry};
      } catch (const BundleError& e) {
        if (auto log = detail::logger()) log->warn("skipping bundle entry: {}", e.what());
      }
    }
  }
  return std::nullopt;
}

}  // namespace xqajit
