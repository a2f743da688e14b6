// Atomic file writes: temporary file in the same directory, fsync, rename (model/atomic_file.h).
#include "model/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace {

[[noreturn]] void fail(const std::string& file, const char* what, int error) {
  throw std::runtime_error(file + ": " + what + ": " + std::strerror(error));
}

// Makes the rename itself durable: a directory entry reaches the disk with its directory's fsync.
void sync_directory_of(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  const std::string dir = parent.empty() ? std::string(".") : parent.string();
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) fail(dir, "open failed", errno);
  const int status = fsync(fd);
  const int error = errno;
  close(fd);
  if (status != 0) fail(dir, "fsync failed", error);
}

}  // namespace

void write_file_atomically(const std::string& path, const std::vector<FilePart>& parts) {
  // Same directory as path, so that rename stays within one file system and is atomic.
  const std::string tmp = path + ".tmp";
  FILE* file = std::fopen(tmp.c_str(), "wb");
  if (file == nullptr) fail(tmp, "open failed", errno);
  // The first failure is the one reported; errno is read right after the call that set it.
  const char* failed = nullptr;
  int error = 0;
  auto note_failure = [&](const char* what) {
    if (failed != nullptr) return;
    failed = what;
    error = errno;
  };
  // An empty part is skipped: fwrite's pointer must be valid even for no bytes, and an empty
  // vector's data() (a state file's master weights in an fp32 run) may be null.
  for (const FilePart& part : parts)
    if (failed == nullptr && part.bytes > 0 && std::fwrite(part.data, 1, part.bytes, file) != part.bytes)
      note_failure("write failed");
  if (std::fflush(file) != 0) note_failure("write failed");
  if (fsync(fileno(file)) != 0) note_failure("fsync failed");
  if (std::fclose(file) != 0) note_failure("close failed");
  if (failed != nullptr) {
    std::remove(tmp.c_str());
    fail(tmp, failed, error);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    error = errno;
    std::remove(tmp.c_str());
    fail(path, "rename failed", error);
  }
  sync_directory_of(path);
}
