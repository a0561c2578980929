#pragma once
// The thesis's ready-made two-width mixes (listing 5.6) and the mix_prob schedules (section 5.7:
// "mix_levels_prob may be constant or scheduled, e.g. higher in early epochs, decayed later").
#include <string>
#include <string_view>
#include <vector>

namespace packrat {

struct MixPreset {
  std::string name;  // "2/4@0.5"
  int base_bits = 2, mix_bits = 4;
  double mix_prob = 0.5;
};

// 2/4 at 0.5, 2/6 at 0.3, 3/6 at 0.4, 4/8 at 0.2 (listing 5.6), named "2/4@0.5" and so on;
// the thesis's names ("2bit_4bit_mix", ...) are accepted as aliases.
const std::vector<MixPreset>& mix_presets();
// A preset by name, a thesis alias, or any "A/B@p" (A <= B bits, p in [0, 1]); throws naming
// `where` and the known presets otherwise.
MixPreset parse_mix_preset(std::string_view text, std::string_view where);

enum class ScheduleKind : uint8_t { Constant, Linear, Cosine };
std::string_view schedule_kind_name(ScheduleKind k);

// mix_prob as a function of training progress in [0, 1] (fraction of the run done):
// constant `start`; linear from `start` to `end`; cosine from `start` to `end` (half period).
struct MixSchedule {
  ScheduleKind kind = ScheduleKind::Constant;
  double start = 0.5, end = 0.5;
  double at(double progress) const;  // progress is clamped to [0, 1]
  // Throws naming `where` for probabilities outside [0, 1].
  void check(std::string_view where) const;
  std::string describe() const;  // "0.5", "linear 0.8 -> 0.2", ...
};

}  // namespace packrat
