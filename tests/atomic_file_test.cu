// Checks of atomic writes (model/atomic_file.h): the file appears whole or not at all,
// and no temporary file is left behind.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>

#include <string>
#include <vector>

#include "model/atomic_file.h"
#include "tests/file_tools.h"

TEST(AtomicFile, WriteLeavesOnlyTheFile) {
  TempDir dir;
  const std::string text = "hello", more = " world";
  write_file_atomically(dir.file("f"), {{text.data(), text.size()}, {more.data(), more.size()}});
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"f"});
  const std::vector<char> bytes = read_bytes(dir.file("f"));
  EXPECT_EQ(std::string(bytes.begin(), bytes.end()), "hello world");
}

TEST(AtomicFile, ReplacesTheWholeOldFile) {
  TempDir dir;
  const std::vector<char> long_contents(100000, 'a'), short_contents(10, 'b');
  write_file_atomically(dir.file("f"), {{long_contents.data(), long_contents.size()}});
  write_file_atomically(dir.file("f"), {{short_contents.data(), short_contents.size()}});
  EXPECT_EQ(read_bytes(dir.file("f")), short_contents);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"f"});
}

// A write that fails part way (here: the file size limit, as a full disk would) keeps the
// old file whole and removes the partial temporary file.
TEST(AtomicFile, FailedWriteKeepsTheOldFile) {
  TempDir dir;
  const std::vector<char> old_contents(1000, 'o'), new_contents(1 << 20, 'n');
  write_file_atomically(dir.file("f"), {{old_contents.data(), old_contents.size()}});

  rlimit saved;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
  rlimit small = saved;
  small.rlim_cur = 65536;
  void (*saved_handler)(int) = signal(SIGXFSZ, SIG_IGN);  // fail with EFBIG instead of the signal
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  const std::string error = error_of([&] {
    write_file_atomically(dir.file("f"), {{new_contents.data(), new_contents.size()}});
  });
  setrlimit(RLIMIT_FSIZE, &saved);
  signal(SIGXFSZ, saved_handler);

  EXPECT_EQ(error, dir.file("f") + ".tmp: write failed: File too large");
  EXPECT_EQ(read_bytes(dir.file("f")), old_contents);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"f"});
}

TEST(AtomicFile, MissingDirectoryErrorNamesTheFile) {
  TempDir dir;
  const std::string text = "x";
  EXPECT_EQ(error_of([&] {
              write_file_atomically(dir.file("none/f"), {{text.data(), text.size()}});
            }),
            dir.file("none/f") + ".tmp: open failed: No such file or directory");
}
