#include "experiments/lib/run.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>

#include "core/device_runtime.h"
#include "core/parallel.h"
#include "data/loader.h"
#include "data/transforms.h"
#include "experiments/lib/checkpoint.h"
#include "experiments/lib/distributed_run.h"
#include "experiments/lib/init_from.h"
#include "experiments/lib/output_dir.h"
#include "experiments/lib/progress.h"
#include "experiments/lib/safetensors.h"
#include "experiments/lib/session.h"
#include "experiments/lib/step_log.h"
#include "experiments/lib/text_task.h"
#include "experiments/lib/train_loop.h"
#include "quant/mixed/mixed_store.h"

namespace packrat {

namespace {

// The model is built for the training images' shape; test images of another size would pass
// through its global pooling silently and measure something else.
void check_test_shape(const Config& c, const data::Loader& train, const data::Loader& test) {
  PACKRAT_CHECK(train.image_shape() == test.image_shape(),
                "{}: the test images ({}) are {} but the training images ({}) are {} (C, H, W), after "
                "data.test_transforms and data.train_transforms: make both end at the same size (resize(...) or "
                "random_crop(...) in data.test_transforms; for image_folder, data.height and data.width resize every "
                "image)",
                c.source, test.dataset().source(), test.image_shape().str(), train.dataset().source(),
                train.image_shape().str());
}

std::unique_ptr<data::Loader> make_loader(const Config& c, std::shared_ptr<const data::Dataset> ds, bool train,
                                          const DataParallel* dp) {
  data::LoaderOptions o;
  if (dp) {  // training: each rank its part of every global batch; evaluation: its part of the test set
    o.shard_index = dp->rank();
    o.shard_count = dp->size();
    o.split_batches = train;
  }
  o.batch_size = train ? c.data.batch_size : c.data.eval_batch_size;
  o.shuffle = train;
  o.seed = c.seed;
  o.limit = train ? c.data.limit_train : c.data.limit_test;
  o.prefetch = c.data.prefetch;
  o.threads = static_cast<int>(c.data.workers);
  o.masked_lm = is_masked_lm(c);
  o.fixed_masks = !train;  // evaluation masks the same positions every epoch
  // Batches bound for a GPU in page-locked memory, so that their copy to it is asynchronous.
  o.host_memory = pinned_host_allocator(Device::parse(c.device));
  return std::make_unique<data::Loader>(ds, data::parse_pipeline(train ? c.data.train_transforms : c.data.test_transforms), o);
}

// Adds train.log to the default logger while it lives.
class LogFile {
 public:
  LogFile(const std::string& path, bool truncate)
      : sink_(std::make_shared<spdlog::sinks::basic_file_sink_mt>(path, truncate)) {
    spdlog::default_logger()->sinks().push_back(sink_);
  }
  ~LogFile() {
    auto& sinks = spdlog::default_logger()->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  }
  LogFile(const LogFile&) = delete;
  LogFile& operator=(const LogFile&) = delete;

 private:
  std::shared_ptr<spdlog::sinks::basic_file_sink_mt> sink_;
};

}  // namespace

void check_output_outside_data(const Config& c) {
  namespace fs = std::filesystem;
  // Datasets read every file under their root: a run directory there would be read as data.
  const std::string& d = c.data.dataset;
  if (c.data.root.empty() || (d != "text" && d != "text_classes" && d != "image_folder")) return;
  std::error_code ec;
  const fs::path root = fs::weakly_canonical(c.data.root, ec);
  if (ec || !fs::is_directory(root, ec)) return;
  const fs::path out = fs::weakly_canonical(c.output.dir, ec);
  if (ec) return;
  const auto [r, o] = std::mismatch(root.begin(), root.end(), out.begin(), out.end());
  PACKRAT_CHECK(r != root.end(),
                "{}: output.dir {} is inside data.root {}: the {} dataset reads every file there, so the run would "
                "train on its own logs and checkpoints; choose an output.dir outside data.root",
                c.source, c.output.dir, c.data.root, c.data.dataset);
}

RunResult run_training(const Config& c, const RunOptions& o) {
  namespace fs = std::filesystem;
  DataParallel* dp = o.dp;
  const bool root = !dp || dp->root();  // writes the run directory
  // Every check comes before the run directory changes: a refused command leaves it as it was.
  check_output_outside_data(c);  // before check_output_dir makes the directory
  if (root) check_output_dir(c.output.dir, o.resume, o.overwrite);
  apply_process_settings(c);
  const RunDevice on(c);
  RunResult result;
  result.run_dir = c.output.dir;

  auto train_ds = data::open_dataset(dataset_spec(c, data::Split::Train));
  auto test_ds = data::open_dataset(dataset_spec(c, data::Split::Test));
  auto train = make_loader(c, train_ds, true, dp);
  auto test = make_loader(c, test_ds, false, dp);
  const data::ImageShape shape = train->image_shape();
  check_test_shape(c, *train, *test);
  check_in_channels(c, shape.c);
  check_classes(c, train_ds->num_classes());
  InputSpec input{shape.c, shape.h, shape.w, c.model.num_classes > 0 ? c.model.num_classes : train_ds->num_classes()};
  Session s = make_session(c, input);
  // A fresh run may start from another run's weights; a resumed one has them in its own checkpoint.
  std::optional<InitFromResult> init;
  if (!c.train.init_from.empty() && !o.resume)
    init = init_from_checkpoint(c.train.init_from, *s.model, fmt::format("{}: train.init_from", c.source));
  TrainingPosition pos{0, 0, c.seed};
  // fp16: dynamic loss scaling (optim/grad_scaler.h, PyTorch GradScaler's defaults).
  std::optional<GradScaler> scaler;
  if (run_precision(c).precision == Precision::fp16) scaler.emplace();
  GradScaler* const scaling = scaler ? &*scaler : nullptr;
  std::string resumed_from;
  if (o.resume) {
    auto ckpt = latest_checkpoint(c.output.dir);
    PACKRAT_CHECK(ckpt.has_value(), "--resume {}: no checkpoint in {}/checkpoints", c.output.dir, c.output.dir);
    pos = load_checkpoint(*ckpt, *s.model, *s.optimizer, stateful_stores(*s.policy), scaling);  // before the first step
    PACKRAT_CHECK(pos.seed == c.seed, "--resume {}: the checkpoint was written with seed {}, the config has seed {}",
                  c.output.dir, pos.seed, c.seed);
    if (root) {
      check_metrics_for_resume(c.output.dir, pos.epoch);
      StepLogWriter(c.output.dir, /*create=*/false).check(pos.step);
    }
    resumed_from = *ckpt;
  }

  // Every check has passed: from here on the run directory is written.
  std::optional<LogFile> log;
  if (root) {
    prepare_output_dir(c.output.dir, o.resume, o.overwrite);
    if (o.log_file) log.emplace((fs::path(c.output.dir) / "train.log").string(), /*truncate=*/!o.resume);
    write_file_atomic((fs::path(c.output.dir) / "config.yaml").string(), config_to_yaml(c));
    for (const auto& [name, text] : o.extra_files) write_file_atomic((fs::path(c.output.dir) / name).string(), text);
  }
  DataParallelSession dp_session(dp, *s.model, c.distributed);
  // What the adaptive stores log (GACT's bit allocations, one CSV block per refresh) goes to the
  // run directory unless the config names a file (saved_tensors: {scheme: gact, log_path: ...}).
  std::map<std::string, int, std::less<>> index_of_state;
  for (SavedTensorStore* st : stateful_stores(*s.policy))
    st->log_to(root ? c.output.dir : std::string(), index_of_state[std::string(st->state_name())]++);
  const int64_t steps_per_epoch = c.train.steps_per_epoch > 0
                                      ? std::min(c.train.steps_per_epoch, train->batches_per_epoch())
                                      : train->batches_per_epoch();
  const LrSchedule schedule = make_schedule(c, steps_per_epoch);
  const int64_t total_steps = std::max<int64_t>(1, c.train.epochs * steps_per_epoch);
  spdlog::info("run {}: {} ({} parameters) on {}, {} train / {} test images of {}x{}x{}, batch {}, {} steps per epoch, "
               "{} threads", c.output.dir, c.model.arch, s.model->num_parameters(), on.device().str(), train->size(),
               test->size(), shape.c, shape.h, shape.w, c.data.batch_size, steps_per_epoch, num_threads());

  std::optional<MetricsWriter> metrics;
  std::optional<StepLogWriter> step_log;
  if (root) {
    metrics.emplace(c.output.dir);
    step_log.emplace(c.output.dir);
    metrics->truncate_after(pos.epoch);  // 0: a fresh run's empty files
    step_log->truncate_after(pos.step);
  }
  if (init) spdlog::info("{}", init->summary());
  if (o.resume) spdlog::info("resumed from {} at epoch {} step {}", resumed_from, pos.epoch, pos.step);
  if (o.resume && !c.train.init_from.empty())
    spdlog::info("train.init_from {} is not applied again: the run continues from its own checkpoint",
                 c.train.init_from);
  result.start_epoch = pos.epoch;
  if (pos.epoch >= c.train.epochs)
    spdlog::info("the run already has its {} epochs (raise train.epochs with --set to train on)", c.train.epochs);

  StepOptions step_options;
  step_options.label_smoothing = c.train.label_smoothing;
  step_options.clip_grad_norm = c.train.clip_grad_norm;
  step_options.sync = dp_session.step();
  step_options.scaler = scaling;
  bool first_step = true;
  for (int64_t epoch = pos.epoch; epoch < c.train.epochs; ++epoch) {
    if (o.stop_after_epoch > 0 && epoch >= o.stop_after_epoch) break;
    EpochMetrics m;
    Progress progress(fmt::format("epoch {}/{}", epoch + 1, c.train.epochs), steps_per_epoch, c.train.log_interval, o.tty);
    if (is_text_task(c)) progress.show_bits_per_byte();
    double loss_sum = 0;
    int64_t correct = 0, seen = 0;  // seen: the labels averaged over (masked-language-model: the masked bytes)
    int64_t processed = 0;          // images, or tokens of a text run: the throughput's unit
    train->start_epoch(epoch);
    data::Batch b;
    StepAverager interval;  // the steps since the last steps.csv row
    // One steps.csv row; under data parallelism, of the interval's sums over every rank's shard.
    auto log_steps = [&](int64_t epoch_index) {
      if (dp) interval.reduce([&](std::vector<double>& sums) { sum_over_ranks(*dp, sums, "steps.csv row"); });
      const StepRow row = interval.take(pos.step, epoch_index + 1, s.optimizer->lr());
      if (step_log) step_log->append(row);
    };
    for (int64_t i = 0; i < steps_per_epoch && train->next(b); ++i) {
      s.optimizer->set_lr(schedule.lr(epoch, i));
      // The fraction of the run done, for scheduled stores (mixed's mix_prob_end); a store's own
      // total_steps, when configured, takes precedence at its begin_step.
      set_training_progress(*s.policy, std::min(1.0, static_cast<double>(pos.step) / static_cast<double>(total_steps)));
      step_options.capture_saved = first_step;
      step_options.global_count = b.global_size * labels_per_sample(c);  // labels, as StepResult::count
      StepResult r = train_step(*s.model, *s.optimizer, *s.policy, b.images, b.labels, pos.step, step_options);
      ++pos.step;
      if (first_step) {
        result.report = make_memory_report(b.images.dim(0), r, s.recomputed);
        if (root) write_memory_report(result.report, c.output.dir);
        if (o.print_report && root) std::fputs(memory_report_table(result.report).c_str(), stdout);
        if (dp && o.print_report) std::fputs(gather_memory_reports(*dp, result.report, c.output.dir).c_str(), stdout);
        else if (dp) gather_memory_reports(*dp, result.report, c.output.dir);
        std::fflush(stdout);
        first_step = false;
      }
      if (i == 0) m.saved_bytes = r.saved_record_bytes;
      loss_sum += r.loss * static_cast<double>(r.count);
      correct += r.correct;
      seen += r.count;
      processed += is_text_task(c) ? b.images.numel() : b.images.dim(0);
      m.peak_bytes = std::max(m.peak_bytes, r.memory.total_peak);
      for (size_t t = 0; t < kNumTags; ++t) m.peak_by_tag[t] = std::max(m.peak_by_tag[t], r.memory.peak[t]);
      interval.add(r.loss, r.correct, r.count);
      if ((i + 1) % c.train.log_interval == 0 || i + 1 == steps_per_epoch) log_steps(epoch);
      if (root) progress.update(i + 1, loss_sum / static_cast<double>(seen), static_cast<double>(correct) / static_cast<double>(seen), processed);
    }
    if (root) progress.finish();
    if (!interval.empty()) log_steps(epoch);  // a short epoch
    if (dp) {  // the epoch's figures over every rank's shard
      std::vector<double> sums{loss_sum, static_cast<double>(correct), static_cast<double>(seen),
                               static_cast<double>(processed)};
      sum_over_ranks(*dp, sums, "epoch metrics");
      loss_sum = sums[0];
      correct = static_cast<int64_t>(sums[1]);
      seen = static_cast<int64_t>(sums[2]);
      processed = static_cast<int64_t>(sums[3]);
    }
    m.epoch = epoch + 1;
    m.step = pos.step;
    m.train_loss = seen ? loss_sum / static_cast<double>(seen) : 0.0;
    m.train_acc = seen ? static_cast<double>(correct) / static_cast<double>(seen) : 0.0;
    m.lr = s.optimizer->lr();
    m.seconds = progress.seconds();
    m.img_per_s = dp ? static_cast<double>(processed) / std::max(1e-9, m.seconds) : progress.img_per_s();  // all ranks'
    if (scaler && root)
      spdlog::info("epoch {}: loss scale {:g}, {} steps skipped so far (inf or NaN gradients)", epoch + 1,
                   scaler->scale(), scaler->skipped());
    const bool last = epoch + 1 == c.train.epochs;
    if ((epoch + 1) % c.train.eval_interval == 0 || last) {
      EvalResult e = evaluate(*s.model, *test, epoch);
      if (dp) {  // every rank evaluated its part of the test set
        const double n = static_cast<double>(e.count);
        std::vector<double> sums{e.loss * n, e.accuracy * n, n};
        sum_over_ranks(*dp, sums, "evaluation metrics");
        e.loss = sums[2] > 0 ? sums[0] / sums[2] : 0;
        e.accuracy = sums[2] > 0 ? sums[1] / sums[2] : 0;
      }
      m.test_loss = e.loss;
      m.test_acc = e.accuracy;
    }
    if (is_text_task(c)) {
      m.train_bpb = bits_per_byte(m.train_loss);
      m.test_bpb = bits_per_byte(m.test_loss);
      spdlog::info("epoch {}/{}: train {:.4f} bits/byte | validation {} ({} tokens/s)", m.epoch, c.train.epochs,
                   m.train_bpb,
                   std::isfinite(m.test_bpb) ? fmt::format("{:.4f} bits/byte", m.test_bpb) : "not evaluated this epoch",
                   static_cast<int64_t>(m.img_per_s));
    }
    if (metrics) metrics->append(m);
    spdlog::info("epoch {}/{}: train loss {:.4f} acc {:.2f}% | test loss {:.4f} acc {:.2f}% | lr {:.4g} | {:.0f} img/s | "
                 "{} | peak {}", m.epoch, c.train.epochs, m.train_loss, 100 * m.train_acc, m.test_loss,
                 100 * m.test_acc, m.lr, m.img_per_s, Progress::format_duration(m.seconds), format_bytes(m.peak_bytes));
    // After the row is written and logged, before a checkpoint of a diverged model.
    if ((epoch + 1) % c.train.eval_interval == 0 || last)
      PACKRAT_CHECK(std::isfinite(m.test_loss),
                    "epoch {}: the test loss is {} (not finite; train loss {:.4g}): the model diverged (or the test "
                    "inputs overflow it: check data.test_transforms), so no checkpoint is written for this epoch. "
                    "Try a lower optimizer.lr (now {:g}), a warm-up "
                    "(schedule.warmup_epochs), gradient clipping (train.clip_grad_norm: 1.0), or FP32 storage for the "
                    "saved tensors (saved_tensors.default: fp32)",
                    epoch + 1, m.test_loss, m.train_loss, c.optimizer.lr);
    result.epochs.push_back(m);
    pos.epoch = epoch + 1;
    const bool stopping = o.stop_after_epoch > 0 && pos.epoch >= o.stop_after_epoch;
    if (last || stopping || (c.output.checkpoint_interval > 0 && pos.epoch % c.output.checkpoint_interval == 0)) {
      const std::string path = checkpoint_path(c.output.dir, pos.epoch);
      if (root) {
        save_checkpoint(path, *s.model, *s.optimizer, pos, c.model.arch, stateful_stores(*s.policy), scaling);
        spdlog::info("checkpoint {}", path);
      }
    }
  }
  return result;
}

}  // namespace packrat
