// DirectoryLock: one holder per run or sweep directory, released when the holder goes.
#include "experiments/lib/dir_lock.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "tests/experiments/tiny_config.h"
#include "tests/support/errors.h"

using namespace packrat;
using namespace packrat::testing;
namespace fs = std::filesystem;

TEST(DirectoryLock, ASecondHolderIsRefusedWithTheDirectoryAndTheHoldersPid) {
  const fs::path dir = temp_dir("dir_lock_second");
  DirectoryLock first(dir.string(), "output.dir");
  ASSERT_TRUE(first.held());
  const std::string msg = message_of([&] { DirectoryLock second(dir.string(), "output.dir"); });
  EXPECT_NE(msg.find("output.dir " + dir.string() + " is in use by another packrat process (pid " +
                     std::to_string(::getpid()) + ")"),
            std::string::npos)
      << msg;
}

TEST(DirectoryLock, IsFreeAgainOnceTheHolderIsGoneAndAcrossProcesses) {
  const fs::path dir = temp_dir("dir_lock_release");
  { DirectoryLock first(dir.string(), "output.dir"); }
  DirectoryLock again(dir.string(), "output.dir");
  EXPECT_TRUE(again.held());
  // Another process is refused while this one holds it (flock is per open file, across processes).
  const pid_t child = ::fork();
  if (child == 0) {
    try {
      DirectoryLock other(dir.string(), "output.dir");
      ::_exit(0);
    } catch (...) {
      ::_exit(3);
    }
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_EQ(WEXITSTATUS(status), 3);
  DirectoryLock moved = std::move(again);
  EXPECT_TRUE(moved.held());
  EXPECT_FALSE(again.held());
}
