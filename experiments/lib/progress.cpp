#include "experiments/lib/progress.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdio>
#include <numbers>

namespace packrat {

Progress::Progress(std::string title, int64_t total, int64_t interval, int tty)
    : title_(std::move(title)), total_(total), interval_(std::max<int64_t>(1, interval)),
      tty_(tty < 0 ? ::isatty(STDERR_FILENO) != 0 : tty != 0), start_(std::chrono::steady_clock::now()) {}

double Progress::seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

double Progress::img_per_s() const {
  const double s = seconds();
  return s > 0 ? static_cast<double>(images_) / s : 0.0;
}

std::string Progress::format_duration(double seconds) {
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  if (s >= 3600) return fmt::format("{}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60);
  return fmt::format("{}:{:02}", s / 60, s % 60);
}

void Progress::update(int64_t done, double loss, double acc, int64_t images) {
  images_ = images;
  const double elapsed = seconds();
  const double eta = done > 0 ? elapsed / static_cast<double>(done) * static_cast<double>(total_ - done) : 0.0;
  const std::string stats =
      bits_per_byte_ ? fmt::format("bpb {:.4f}  acc {:.2f}%  {:.0f} tok/s  ETA {}", loss / std::numbers::ln2, 100 * acc,
                                   img_per_s(), format_duration(eta))
                     : fmt::format("loss {:.4f}  acc {:.2f}%  {:.0f} img/s  ETA {}", loss, 100 * acc, img_per_s(),
                                   format_duration(eta));
  if (tty_) {
    constexpr int kWidth = 30;
    const int filled = total_ > 0 ? static_cast<int>(kWidth * done / total_) : kWidth;
    std::string bar(static_cast<size_t>(filled), '#');
    bar.append(static_cast<size_t>(kWidth - filled), '.');
    std::fprintf(stderr, "\r%s [%s] %lld/%lld  %s\x1b[K", title_.c_str(), bar.c_str(), static_cast<long long>(done),
                 static_cast<long long>(total_), stats.c_str());
    std::fflush(stderr);
    open_ = true;
  } else if (done % interval_ == 0 || done == total_) {
    spdlog::info("{} step {}/{}  {}", title_, done, total_, stats);
  }
}

void Progress::finish() {
  if (open_) {
    std::fprintf(stderr, "\n");
    std::fflush(stderr);
    open_ = false;
  }
}

}  // namespace packrat
