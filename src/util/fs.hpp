#pragma once
/// Small POSIX file helpers for the disk cache: an owned file descriptor,
/// crash-safe atomic file replacement, directory fsync and kernel-released
/// file locks. Every function reports trouble through std::error_code and never
/// throws for I/O errors, so the cache can degrade instead of failing a launch.

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace xqajit::detail {

/// Owns a POSIX file descriptor; closes it on destruction.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept;
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd();

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  /// Gives up ownership without closing.
  int release();
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

/// "<pid>.<random hex>": unique across processes and calls, for temp and trash names.
std::string unique_suffix();

/// True for the names write_file_atomically gives its temp files
/// ("." + target name + ".tmp." + suffix), so cleanup can recognise strays.
bool is_temp_file_name(std::string_view filename);

/// Replaces `target` with `size` bytes at `data` so that a reader sees either
/// the old file or the complete new one, never a prefix: writes a unique temp
/// file in the same directory (same filesystem, so rename is atomic), fsyncs it,
/// then renames it over `target`. On failure the temp file is removed. The
/// directory itself is not fsynced (see fsync_directory).
std::error_code write_file_atomically(const std::filesystem::path& target, const void* data,
                                      std::size_t size);

/// Makes renames and unlinks inside `dir` durable.
std::error_code fsync_directory(const std::filesystem::path& dir);

/// Reads a whole regular file into `out`.
std::error_code read_whole_file(const std::filesystem::path& path, std::vector<char>& out);

/// Sets the file's modification time to now (LRU bookkeeping).
std::error_code touch(const std::filesystem::path& path);

enum class LockWait { kBlock, kTry };

/// Opens (creating if needed) `path` and takes an exclusive flock on it. The
/// kernel drops the lock when the holder's descriptor closes, including when the
/// process dies, so no lock is ever left stale. If the file was unlinked or
/// replaced while we waited (eviction removes lock files), the lock is retaken on
/// the current file so two holders never hold different inodes. With kTry an
/// already held lock returns an invalid fd and errc::resource_unavailable_try_again.
UniqueFd lock_file(const std::filesystem::path& path, LockWait wait, std::error_code& ec);

/// Bookkeeping of the locks this process holds for callers (EntryLock), by file
/// identity, so a library function can tell whether its caller already holds a
/// lock: taking it again through a second descriptor would deadlock, because
/// flock locks belong to open file descriptions, not to processes.
void remember_held_lock(int fd);
/// Call before closing the descriptor: descriptor numbers are reused.
void forget_held_lock(int fd);
bool this_process_holds_lock(const std::filesystem::path& path);

}  // namespace xqajit::detail
