#pragma once
// Per-epoch progress: on a terminal (stderr is a tty) one redrawn bar with loss, accuracy, img/s
// and ETA; otherwise a plain log line every `interval` steps and at the end.
#include <chrono>
#include <cstdint>
#include <string>

namespace packrat {

class Progress {
 public:
  // total: steps in the epoch; tty: draw a bar (default: isatty(stderr)).
  Progress(std::string title, int64_t total, int64_t interval, int tty = -1);
  // After step `done` (1-based) with the running mean loss/accuracy of the epoch so far.
  void update(int64_t done, double loss, double acc, int64_t images);
  void finish();  // ends the bar's line
  // Text runs: the line shows bits per byte (loss / ln 2) and tok/s instead of loss and img/s.
  void show_bits_per_byte() { bits_per_byte_ = true; }
  double seconds() const;
  double img_per_s() const;
  static std::string format_duration(double seconds);  // "1:05" or "1:02:03"

 private:
  std::string title_;
  int64_t total_, interval_;
  bool tty_;
  int64_t images_ = 0;
  std::chrono::steady_clock::time_point start_;
  bool open_ = false;
  bool bits_per_byte_ = false;
};

}  // namespace packrat
