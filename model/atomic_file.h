// Writes a file so that a reader, or a run that crashes mid-write, sees either the old
// file or the whole new one, never part of it: write <path>.tmp, flush, fsync, rename.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

// One contiguous piece of the file's contents.
struct FilePart {
  const void* data;
  size_t bytes;
};

// Writes the parts back to back to path. On failure removes <path>.tmp, leaves any
// old file at path untouched and throws std::runtime_error naming the file and the OS
// error, e.g. "run/model.bin.tmp: write failed: No space left on device".
void write_file_atomically(const std::string& path, const std::vector<FilePart>& parts);
