#include "experiments/lib/memory_report.h"

#include <algorithm>
#include <filesystem>
#include <map>

#include "core/autocast.h"
#include "experiments/lib/safetensors.h"  // write_file_atomic

namespace packrat {

std::string format_bytes(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (bytes < 0) return "-" + format_bytes(-bytes);
  if (bytes < 1024) return fmt::format("{} B", bytes);
  if (b < 1024.0 * 1024) return fmt::format("{:.1f} KiB", b / 1024);
  if (b < 1024.0 * 1024 * 1024) return fmt::format("{:.2f} MiB", b / (1024.0 * 1024));
  return fmt::format("{:.2f} GiB", b / (1024.0 * 1024 * 1024));
}

MemoryReport make_memory_report(int64_t batch_size, std::vector<SavedRecord> records, int64_t allocator_saved_bytes,
                                const MemoryStats& step) {
  MemoryReport r;
  r.batch_size = batch_size;
  r.tensors = std::move(records);
  for (const auto& t : r.tensors) {
    r.saved_bytes += t.bytes;
    r.saved_fp32_bytes += t.fp32_bytes;
    r.saved_f32_bytes += t.f32_bytes;
  }
  r.precision = autocast_dtype();
  r.allocator_saved_bytes = allocator_saved_bytes;
  r.step = step;
  return r;
}

MemoryReport make_memory_report(int64_t batch_size, StepResult& step, const std::vector<std::string>& recomputed) {
  MemoryReport r = make_memory_report(batch_size, std::move(step.saved), step.saved_allocator_bytes, step.memory);
  r.recomputed = recomputed;
  r.recompute = step.recompute;
  r.forward_s = step.forward_s;
  r.backward_s = step.backward_s;
  r.offload = step.offload;
  return r;
}

namespace {

// The layers holding saved bytes on either side, in name order: (device, host) bytes.
std::map<std::string, std::pair<int64_t, int64_t>> offload_layers(const OffloadStep& o) {
  std::map<std::string, std::pair<int64_t, int64_t>> by;
  for (const auto& [l, b] : o.device_by_layer)
    if (b > 0) by[l].first = b;
  for (const auto& [l, b] : o.host_by_layer)
    if (b > 0) by[l].second = b;
  return by;
}

Json offload_json(const OffloadStep& o) {
  Json j = Json::object();
  j["device_saved_bytes"] = Json(o.device_saved);
  j["host_saved_bytes"] = Json(o.host_saved);
  j["host_peak_bytes"] = Json(o.host_peak);
  j["host_pool_bytes"] = Json(o.host_pool_bytes);
  j["pageable_bytes"] = Json(o.pageable_bytes);
  j["bytes_to_host"] = Json(o.moved.bytes_to_host);
  j["bytes_to_device"] = Json(o.moved.bytes_to_device);
  j["buffers_out"] = Json(o.moved.buffers_out);
  j["prefetched_loads"] = Json(o.moved.prefetched_loads);
  j["synchronous_loads"] = Json(o.moved.synchronous_loads);
  j["forward_waits"] = Json(o.moved.forward_waits);
  j["copy_busy_ms"] = Json(o.moved.copy_busy_s * 1e3);
  Json layers = Json::array();
  for (const auto& [l, bytes] : offload_layers(o)) {
    Json e = Json::object();
    e["layer"] = Json(l);
    e["device_bytes"] = Json(bytes.first);
    e["host_bytes"] = Json(bytes.second);
    layers.push_back(e);
  }
  j["layers"] = layers;
  return j;
}

std::string offload_table(const OffloadStep& o, const std::string& device) {
  std::string s = fmt::format("\nOffload (memory.offload): saved bytes after the forward, its copies to the host done\n"
                              "{:<40} {:>14} {:>14}\n", "layer", "on " + device, "on the host");
  for (const auto& [l, bytes] : offload_layers(o))
    s += fmt::format("{:<40} {:>14} {:>14}\n", l.empty() ? "(no layer)" : l, format_bytes(bytes.first),
                     format_bytes(bytes.second));
  s += fmt::format("{:<40} {:>14} {:>14}\n", "total", format_bytes(o.device_saved), format_bytes(o.host_saved));
  s += fmt::format("Host: peak {} saved; page-locked pool {} ({} bytes){}\n", format_bytes(o.host_peak),
                   format_bytes(o.host_pool_bytes), o.host_pool_bytes,
                   o.pageable_bytes > 0 ? fmt::format(", of which {} from the ordinary heap (page-locked memory refused)",
                                                      format_bytes(o.pageable_bytes))
                                        : std::string());
  s += fmt::format("Moved over the step: {} to the host in {} buffers ({} saves waited for an older copy), {} back; "
                   "{} loads prefetched, {} synchronous{}\n",
                   format_bytes(o.moved.bytes_to_host), o.moved.buffers_out, o.moved.forward_waits,
                   format_bytes(o.moved.bytes_to_device), o.moved.prefetched_loads, o.moved.synchronous_loads,
                   o.moved.copy_busy_s > 0 ? fmt::format("; copy streams busy {:.1f} ms", o.moved.copy_busy_s * 1e3)
                                           : std::string());
  return s;
}

// Totals of r's tensors grouped by key(tensor), in order of first appearance.
template <typename Key>
std::vector<LayerTotals> totals_by(const std::vector<SavedRecord>& tensors, Key key) {
  std::vector<LayerTotals> out;
  std::map<std::string, size_t> index;
  for (const auto& t : tensors) {
    auto [it, fresh] = index.emplace(key(t), out.size());
    if (fresh) out.push_back({key(t)});
    LayerTotals& l = out[it->second];
    l.tensors += 1;
    l.bytes += t.bytes;
    l.fp32_bytes += t.fp32_bytes;
  }
  return out;
}

}  // namespace

std::vector<LayerTotals> MemoryReport::per_layer() const {
  return totals_by(tensors, [](const SavedRecord& t) { return t.layer; });
}

std::vector<LayerTotals> MemoryReport::per_op() const {
  return totals_by(tensors, [](const SavedRecord& t) { return t.op; });
}

std::vector<std::pair<std::string, int64_t>> MemoryReport::per_scheme(std::string_view op) const {
  std::map<std::string, int64_t> m;
  for (const auto& t : tensors)
    if (op.empty() || t.op == op) m[t.scheme] += t.bytes;
  return {m.begin(), m.end()};
}

Json memory_report_json(const MemoryReport& r) {
  Json j = Json::object();
  j["device"] = Json(r.step.device.str());
  j["batch_size"] = Json(r.batch_size);
  Json& totals = j["totals"];
  totals = Json::object();
  totals["saved_bytes"] = Json(r.saved_bytes);
  totals["saved_fp32_bytes"] = Json(r.saved_fp32_bytes);
  totals["compression"] = Json(r.saved_bytes > 0 ? static_cast<double>(r.saved_fp32_bytes) / static_cast<double>(r.saved_bytes) : 0.0);
  // Under autocast saved_fp32_bytes is the FP32 store's at that precision (the AMP baseline);
  // saved_f32_bytes and compression_vs_f32 are against a run without autocast.
  totals["precision"] = Json(std::string(dtype_name(r.precision)));
  totals["saved_f32_bytes"] = Json(r.saved_f32_bytes);
  totals["compression_vs_f32"] =
      Json(r.saved_bytes > 0 ? static_cast<double>(r.saved_f32_bytes) / static_cast<double>(r.saved_bytes) : 0.0);
  totals["allocator_saved_bytes"] = Json(r.allocator_saved_bytes);
  totals["peak_bytes"] = Json(r.step.total_peak);
  Json peak = Json::object();
  for (size_t i = 0; i < kNumTags; ++i) peak[std::string(tag_name(static_cast<MemTag>(i)))] = Json(r.step.peak[i]);
  totals["peak_by_tag"] = peak;
  Json by_scheme = Json::object();
  for (const auto& [s, b] : r.per_scheme()) by_scheme[s] = Json(b);
  totals["saved_bytes_by_scheme"] = by_scheme;
  totals["forward_ms"] = Json(r.forward_s * 1e3);
  totals["backward_ms"] = Json((r.backward_s - r.recompute.recompute_s) * 1e3);
  totals["recompute_ms"] = Json(r.recompute.recompute_s * 1e3);
  if (!r.recomputed.empty()) {
    Json rc = Json::object();
    Json segments = Json::array();
    for (const std::string& m : r.recomputed) segments.push_back(Json(m));
    rc["segments"] = segments;
    Json kept = Json::object();
    for (const auto& [s, b] : r.per_scheme("checkpoint")) kept[s] = Json(b);
    rc["inputs_bytes_by_scheme"] = kept;
    rc["recomputes"] = Json(r.recompute.recomputes);
    rc["recompute_ms"] = Json(r.recompute.recompute_s * 1e3);
    rc["peak_bytes"] = Json(r.recompute.peak_bytes);
    j["recompute"] = rc;
  }
  if (r.offload.on) j["offload"] = offload_json(r.offload);
  Json layers = Json::array();
  for (const auto& l : r.per_layer()) {
    Json e = Json::object();
    e["layer"] = Json(l.layer);
    e["tensors"] = Json(l.tensors);
    e["bytes"] = Json(l.bytes);
    e["fp32_bytes"] = Json(l.fp32_bytes);
    layers.push_back(e);
  }
  j["layers"] = layers;
  Json ops = Json::array();
  for (const auto& o : r.per_op()) {
    Json e = Json::object();
    e["op"] = Json(o.layer);
    e["tensors"] = Json(o.tensors);
    e["bytes"] = Json(o.bytes);
    ops.push_back(e);
  }
  j["ops"] = ops;
  Json tensors = Json::array();
  for (const auto& t : r.tensors) {
    Json e = Json::object();
    e["layer"] = Json(t.layer);
    e["op"] = Json(t.op);
    e["scheme"] = Json(t.scheme);
    e["need"] = Json(need_name(t.need));
    e["bits"] = Json(t.bits);
    e["bytes"] = Json(t.bytes);
    e["fp32_bytes"] = Json(t.fp32_bytes);
    e["numel"] = Json(t.numel);
    e["shape"] = Json(t.shape.dims());
    e["dtype"] = Json(std::string(dtype_name(t.dtype)));
    if (t.shared) e["shared"] = Json(true);
    if (t.exact) e["exact"] = Json(true);
    if (t.statistics) e["statistics"] = Json(true);
    tensors.push_back(e);
  }
  j["tensors"] = tensors;
  return j;
}

namespace {
// Where a row's bytes are counted when not there, and what an exactly kept row holds.
std::string row_note(const MemoryReport& r, const SavedRecord& t) {
  auto first_holder = [&]() -> const SavedRecord* {
    for (const SavedRecord& o : r.tensors)
      if (o.fp32_key == t.fp32_key && &o != &t && (o.fp32_bytes > 0 || (t.shared && !o.shared))) return &o;
    return nullptr;
  };
  auto at = [](const SavedRecord* o) { return (o->layer.empty() ? std::string("-") : o->layer) + " " + o->op; };
  if (t.shared) {
    const SavedRecord* o = t.fp32_key != 0 ? first_holder() : nullptr;
    return o ? "  (the buffer " + at(o) + " keeps: counted once, there)" : "  (shared, counted once)";
  }
  std::string note;
  if (t.exact)
    note = t.need == Need::Derivative ? "  (exact: f' of a step function as a 1-bit mask)"
           : t.need == Need::Index    ? "  (exact index)"
                                      : "  (exact mask)";
  if (t.fp32_bytes == 0 && t.fp32_key != 0)
    if (const SavedRecord* o = first_holder())
      note += "  (FP32 would keep this buffer once, with " + at(o) + ")";
  return note;
}

std::string ratio(int64_t fp32, int64_t held) {
  if (held <= 0) return fp32 > 0 ? "inf" : "-";
  if (fp32 <= 0) return "-";  // FP32 would keep the buffer once, counted at another row
  return fmt::format("{:.2f}x", static_cast<double>(fp32) / static_cast<double>(held));
}
}  // namespace

std::string memory_report_table(const MemoryReport& r) {
  size_t w = 5;
  for (const auto& t : r.tensors) w = std::max(w, t.layer.size());
  std::string s = fmt::format("Saved tensors after the forward of one training step (batch {}, on {}{}):\n",
                              r.batch_size, r.step.device.str(),
                              r.synthetic ? ", synthetic inputs of the data's shape" : "");
  // The baseline column: the FP32 store's bytes, at the run's precision under autocast.
  s += fmt::format("  {:<{}}  {:<14} {:<8} {:>5}  {:>12}  {:>12}  {:>7}\n", "layer", w, "op", "scheme", "bits", "bytes",
                   r.precision == DType::f32 ? "fp32 bytes" : fmt::format("{} AMP bytes", dtype_name(r.precision)),
                   "ratio");
  int64_t folded = 0, folded_bytes = 0;  // batchnorm statistics rows, left to their layer's totals
  for (const auto& t : r.tensors) {
    if (t.statistics && t.op == "batchnorm2d") {
      ++folded;
      folded_bytes += t.bytes;
      continue;
    }
    const std::string note = row_note(r, t);
    s += fmt::format("  {:<{}}  {:<14} {:<8} {:>5.2g}  {:>12}  {:>12}  {:>7}{}\n", t.layer.empty() ? "-" : t.layer, w,
                     t.op, t.scheme, t.bits, t.bytes, t.fp32_bytes, ratio(t.fp32_bytes, t.bytes), note);
  }
  if (folded > 0)
    s += fmt::format("  (and {} batchnorm mean / variance tensors, {} bytes in all, counted in their layers below)\n",
                     folded, folded_bytes);
  // Bytes held per op kind and scheme. (No FP32 column: FP32 keeps a buffer two ops save once,
  // with the first, so a convolution's share would read as nothing beside its ReLU's.)
  s += "Per op (bytes held, by scheme):\n";
  for (const auto& o : r.per_op()) {
    s += fmt::format("  {:<{}}  {:>3} tensors  {:>12} ", o.layer, w, o.tensors, o.bytes);
    for (const auto& [scheme, b] : r.per_scheme(o.layer)) s += fmt::format("  {} {}", scheme, format_bytes(b));
    s += "\n";
  }
  s += "Per layer:\n";
  for (const auto& l : r.per_layer())
    s += fmt::format("  {:<{}}  {:>3} tensors  {:>12}  {:>12}  {:>7}\n", l.layer.empty() ? "-" : l.layer, w, l.tensors,
                     l.bytes, l.fp32_bytes, ratio(l.fp32_bytes, l.bytes));
  s += "Per scheme:";
  for (const auto& [scheme, b] : r.per_scheme()) s += fmt::format("  {} {}", scheme, format_bytes(b));
  s += "\n";
  if (r.precision == DType::f32) {
    s += fmt::format("Total saved: {} ({} bytes) instead of {} in FP32: {} smaller\n", format_bytes(r.saved_bytes),
                     r.saved_bytes, format_bytes(r.saved_fp32_bytes), ratio(r.saved_fp32_bytes, r.saved_bytes));
  } else {  // autocast: against its own baseline (the "fp32 bytes" column) and against f32 training
    s += fmt::format("Total saved: {} ({} bytes) instead of {} with the FP32 store under {} autocast (the AMP "
                     "baseline): {} smaller; instead of {} in f32 training: {} smaller\n",
                     format_bytes(r.saved_bytes), r.saved_bytes, format_bytes(r.saved_fp32_bytes),
                     dtype_name(r.precision), ratio(r.saved_fp32_bytes, r.saved_bytes), format_bytes(r.saved_f32_bytes),
                     ratio(r.saved_f32_bytes, r.saved_bytes));
  }
  if (!r.recomputed.empty()) {
    std::string names;
    for (size_t i = 0; i < r.recomputed.size(); ++i) {
      if (i == 6 && r.recomputed.size() > 8) {
        names += fmt::format(", ... {} more", r.recomputed.size() - i - 1);
        names += ", " + r.recomputed.back();
        break;
      }
      names += (i ? ", " : "") + r.recomputed[i];
    }
    s += fmt::format("Recomputed in backward (memory.recompute): {} segments ({}); they keep only their inputs "
                     "(op checkpoint):",
                     r.recomputed.size(), names);
    for (const auto& [scheme, b] : r.per_scheme("checkpoint")) s += fmt::format("  {} {}", scheme, format_bytes(b));
    const bool shared = std::any_of(r.tensors.begin(), r.tensors.end(),
                                    [](const SavedRecord& t) { return t.op == "checkpoint" && t.shared; });
    if (shared) s += " (an input another op keeps too is counted once, with the op that saved it first)";
    s += fmt::format("\nRecompute phase: {} segment forwards run again, {:.1f} ms of the step's {:.1f} ms backward; "
                     "peak while recomputing {} ({} bytes)\n",
                     r.recompute.recomputes, r.recompute.recompute_s * 1e3, r.backward_s * 1e3,
                     format_bytes(r.recompute.peak_bytes), r.recompute.peak_bytes);
  }
  if (r.offload.on) s += offload_table(r.offload, r.step.device.str());
  s += fmt::format("Peak over the step on {}: {} ({} bytes); by tag:", r.step.device.str(), format_bytes(r.step.total_peak),
                   r.step.total_peak);
  for (size_t i = 0; i < kNumTags; ++i)
    s += fmt::format(" {} {}{}", tag_name(static_cast<MemTag>(i)), format_bytes(r.step.peak[i]), i + 1 < kNumTags ? "," : "");
  return s + "\n";
}

void write_memory_report(const MemoryReport& r, const std::string& dir) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  write_file_atomic((fs::path(dir) / "memory_report.json").string(), memory_report_json(r).dump(2) + "\n");
  std::string tsv = "scheme\tsaved_bytes\n";
  for (const auto& [scheme, b] : r.per_scheme()) tsv += fmt::format("{}\t{}\n", scheme, b);
  write_file_atomic((fs::path(dir) / "saved_by_scheme.tsv").string(), tsv);
}

}  // namespace packrat
