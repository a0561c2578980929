#include "quant/mixed/mixed_presets.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fmt/format.h>

#include "core/error.h"

namespace packrat {

const std::vector<MixPreset>& mix_presets() {
  static const std::vector<MixPreset> presets = {
      {"2/4@0.5", 2, 4, 0.5}, {"2/6@0.3", 2, 6, 0.3}, {"3/6@0.4", 3, 6, 0.4}, {"4/8@0.2", 4, 8, 0.2}};
  return presets;
}

namespace {

const std::vector<std::pair<std::string_view, std::string_view>>& thesis_aliases() {
  static const std::vector<std::pair<std::string_view, std::string_view>> a = {
      {"2bit_4bit_mix", "2/4@0.5"}, {"2bit_6bit_mix", "2/6@0.3"}, {"3bit_6bit_mix", "3/6@0.4"}, {"4bit_8bit_mix", "4/8@0.2"}};
  return a;
}

bool parse_int(std::string_view s, int& v) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return !s.empty() && ec == std::errc() && end == s.data() + s.size();
}

bool parse_prob(std::string_view s, double& v) {
  if (s.empty()) return false;
  try {
    size_t pos = 0;
    v = std::stod(std::string(s), &pos);
    return pos == s.size();
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

MixPreset parse_mix_preset(std::string_view text, std::string_view where) {
  for (const auto& [alias, name] : thesis_aliases())
    if (text == alias) text = name;
  for (const auto& p : mix_presets())
    if (p.name == text) return p;
  std::string known;
  for (const auto& p : mix_presets()) known += (known.empty() ? "" : ", ") + p.name;
  const size_t slash = text.find('/'), at = text.find('@');
  MixPreset p;
  const bool ok = slash != std::string_view::npos && at != std::string_view::npos && slash < at &&
                  parse_int(text.substr(0, slash), p.base_bits) &&
                  parse_int(text.substr(slash + 1, at - slash - 1), p.mix_bits) && parse_prob(text.substr(at + 1), p.mix_prob);
  PACKRAT_CHECK(ok, "{}: preset '{}' is neither a known mix ({}) nor of the form base/mix@prob, e.g. 2/4@0.5", where, text,
                known);
  PACKRAT_CHECK(p.base_bits >= 1 && p.mix_bits >= p.base_bits,
                "{}: preset '{}': mix bits ({}) must be at least the base bits ({}), both at least 1", where, text,
                p.mix_bits, p.base_bits);
  PACKRAT_CHECK(p.mix_prob >= 0.0 && p.mix_prob <= 1.0, "{}: preset '{}': probability {} is outside [0, 1]", where, text,
                p.mix_prob);
  p.name = std::string(text);
  return p;
}

std::string_view schedule_kind_name(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::Constant: return "constant";
    case ScheduleKind::Linear: return "linear";
    case ScheduleKind::Cosine: return "cosine";
  }
  return "?";
}

double MixSchedule::at(double progress) const {
  const double t = std::clamp(std::isnan(progress) ? 0.0 : progress, 0.0, 1.0);
  switch (kind) {
    case ScheduleKind::Constant: return start;
    case ScheduleKind::Linear: return start + (end - start) * t;
    case ScheduleKind::Cosine: return end + (start - end) * 0.5 * (1.0 + std::cos(M_PI * t));
  }
  return start;
}

void MixSchedule::check(std::string_view where) const {
  PACKRAT_CHECK(start >= 0.0 && start <= 1.0, "{}: mix_prob must be a probability in [0, 1], got {}", where, start);
  PACKRAT_CHECK(end >= 0.0 && end <= 1.0, "{}: mix_prob_end must be a probability in [0, 1], got {}", where, end);
}

std::string MixSchedule::describe() const {
  if (kind == ScheduleKind::Constant) return fmt::format("{}", start);
  return fmt::format("{} {} -> {}", schedule_kind_name(kind), start, end);
}

}  // namespace packrat
