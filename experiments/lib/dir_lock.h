#pragma once
// An exclusive lock on a run or sweep directory for the life of the process that holds it, so
// that two trainers (or two sweeps) never write into one directory at once. It is flock(2) on
// `dir`/.packrat.lock: the kernel drops it when the process ends, however it ends, so a killed
// run leaves no stale lock. The file holds the holder's pid, which a refused process names.
#include <string>

namespace packrat {

class DirectoryLock {
 public:
  DirectoryLock() = default;
  // Takes the lock on `dir` (which must exist) without waiting; throws packrat::Error naming
  // `what` ("output.dir"), the directory and the pid of the process that holds it.
  DirectoryLock(const std::string& dir, const std::string& what);
  ~DirectoryLock();
  DirectoryLock(DirectoryLock&& other) noexcept;
  DirectoryLock& operator=(DirectoryLock&& other) noexcept;
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

  bool held() const { return fd_ >= 0; }
  const std::string& dir() const { return dir_; }

 private:
  int fd_ = -1;
  std::string dir_;
};

// The name of the lock file inside a locked directory (it is not a result: runs ignore it).
inline constexpr const char* kLockFileName = ".packrat.lock";

}  // namespace packrat
