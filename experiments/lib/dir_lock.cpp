#include "experiments/lib/dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "core/error.h"

namespace packrat {

namespace {

// The pid the holder wrote into the lock file, or "" when it cannot be read.
std::string holder_pid(int fd) {
  char buf[32] = {};
  const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
  if (n <= 0) return "";
  std::string pid(buf, size_t(n));
  while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
  return pid;
}

}  // namespace

DirectoryLock::DirectoryLock(const std::string& dir, const std::string& what) : dir_(dir) {
  const std::string path = (std::filesystem::path(dir) / kLockFileName).string();
  // O_CLOEXEC: a child process (gnuplot, mpirun) does not inherit the lock.
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("{} {}: cannot create its lock file {}: {}", what, dir, path, std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const std::string pid = holder_pid(fd_);
    ::close(fd_);
    fd_ = -1;
    if (err == EWOULDBLOCK)
      fail("{} {} is in use by another packrat process{}; wait for it to finish or choose another directory", what,
           dir, pid.empty() ? "" : " (pid " + pid + ")");
    fail("{} {}: cannot lock {}: {}", what, dir, path, std::strerror(err));
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  // A failed write leaves the lock held all the same; only the pid a refused process names is lost.
  if (::ftruncate(fd_, 0) == 0) (void)!::pwrite(fd_, pid.data(), pid.size(), 0);
}

DirectoryLock::~DirectoryLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the descriptor releases the flock
}

DirectoryLock::DirectoryLock(DirectoryLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), dir_(std::move(other.dir_)) {}

DirectoryLock& DirectoryLock::operator=(DirectoryLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    dir_ = std::move(other.dir_);
  }
  return *this;
}

}  // namespace packrat
