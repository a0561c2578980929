#include "data/loader.h"

#include <algorithm>
#include <new>
#include <numeric>

#include "core/device_runtime.h"
#include "core/error.h"
#include "core/philox.h"
#include "data/masked_lm.h"
#include "data/text.h"
#include "data/text_classes.h"

namespace packrat::data {

Loader::Loader(std::shared_ptr<const Dataset> dataset, Pipeline pipeline, LoaderOptions options)
    : dataset_(std::move(dataset)), pipeline_(std::move(pipeline)), options_(options) {
  PACKRAT_CHECK(dataset_ != nullptr, "loader: no dataset");
  PACKRAT_CHECK(options_.batch_size > 0, "loader {}: batch size {} must be positive", dataset_->name(), options_.batch_size);
  PACKRAT_CHECK(options_.limit >= 0, "loader {}: limit {} must not be negative", dataset_->name(), options_.limit);
  PACKRAT_CHECK(options_.prefetch >= 1, "loader {}: prefetch {} must be at least 1", dataset_->name(), options_.prefetch);
  PACKRAT_CHECK(options_.threads >= 1, "loader {}: threads {} must be at least 1", dataset_->name(), options_.threads);
  PACKRAT_CHECK(options_.shard_count >= 1 && options_.shard_index >= 0 && options_.shard_index < options_.shard_count,
                "loader {}: shard {} of {} does not exist", dataset_->name(), options_.shard_index, options_.shard_count);
  size_ = options_.limit > 0 ? std::min(options_.limit, dataset_->size()) : dataset_->size();
  if (!options_.split_batches && options_.shard_count > 1)  // this shard's contiguous part of every epoch
    size_ = shard_end(options_.shard_index) - shard_end(options_.shard_index - 1);
  PACKRAT_CHECK(size_ > 0, "loader {}: the dataset is empty", dataset_->name());
  in_shape_ = dataset_->image_shape();
  text_ = dynamic_cast<const TextDataset*>(dataset_.get());
  classes_ = dynamic_cast<const TextClassesDataset*>(dataset_.get());
  PACKRAT_CHECK((text_ == nullptr && classes_ == nullptr) || pipeline_.empty(),
                "loader {}: a text dataset takes no transforms, got {} (remove data.train_transforms and "
                "data.test_transforms)",
                dataset_->name(), pipeline_.describe());
  PACKRAT_CHECK(!options_.masked_lm || text_ != nullptr,
                "loader {}: masked-language-model samples come from a text dataset (data.dataset: text)",
                dataset_->name());
  PACKRAT_CHECK(!options_.masked_lm || text_->seq_len() >= 2,
                "loader {}: a masked-language-model sample of {} token(s) has no byte to mask (the class token comes "
                "first): data.seq_len must be at least 2",
                dataset_->name(), text_ == nullptr ? 0 : text_->seq_len());
  out_shape_ = pipeline_.output_shape(in_shape_);
  PACKRAT_CHECK(out_shape_.numel() <= kMaxImageValues,
                "loader {}: the transforms ({}) make images of {} = {} values, more than {} (1 GiB of f32) per image",
                dataset_->name(), pipeline_.describe(), out_shape_.str(), out_shape_.numel(), kMaxImageValues);
}

Loader::~Loader() { stop(); }

int64_t Loader::batches_per_epoch() const {
  return options_.drop_last ? size_ / options_.batch_size : (size_ + options_.batch_size - 1) / options_.batch_size;
}

std::vector<int64_t> Loader::order(int64_t epoch) const {
  // The whole epoch's order (every shard's), then this shard's part of it when epochs are sharded.
  const int64_t all = shard_end(options_.shard_count - 1);
  std::vector<int64_t> idx(static_cast<size_t>(all));
  std::iota(idx.begin(), idx.end(), int64_t{0});
  if (options_.shuffle) {
    PhiloxStream rng(options_.seed, kShuffleStream | static_cast<uint64_t>(epoch));
    for (int64_t i = all - 1; i > 0; --i) std::swap(idx[i], idx[rng.below(static_cast<uint64_t>(i + 1))]);
  }
  if (options_.split_batches || options_.shard_count == 1) return idx;
  return {idx.begin() + shard_end(options_.shard_index - 1), idx.begin() + shard_end(options_.shard_index)};
}

int64_t Loader::shard_end(int shard) const {
  const int64_t all = options_.limit > 0 ? std::min(options_.limit, dataset_->size()) : dataset_->size();
  return all * (shard + 1) / options_.shard_count;
}

Error Loader::out_of_host_memory() const {
  return Error(fmt::format("loader {}: out of host memory preparing images of {} through {}", dataset_->name(),
                           in_shape_.str(), pipeline_.describe()));
}

Batch Loader::allocate_batch(const std::vector<int64_t>& order, int64_t epoch, int64_t batch_index) const {
  int64_t begin = batch_index * options_.batch_size;
  int64_t n = std::min(options_.batch_size, static_cast<int64_t>(order.size()) - begin);
  PACKRAT_CHECK(n > 0, "loader {}: batch {} is past the end of the epoch", dataset_->name(), batch_index);
  Batch b;
  b.global_size = n;
  if (options_.split_batches && options_.shard_count > 1) {  // this shard's part of the global batch
    const int64_t lo = n * options_.shard_index / options_.shard_count;
    const int64_t hi = n * (options_.shard_index + 1) / options_.shard_count;
    PACKRAT_CHECK(hi > lo, "loader {}: batch {} of epoch {} has {} sample(s), fewer than the {} data-parallel ranks "
                  "(the epoch's last batch): choose data.limit_train or train.steps_per_epoch so that every batch has "
                  "at least one sample per rank", dataset_->name(), batch_index, epoch, n, options_.shard_count);
    begin += lo;
    n = hi - lo;
  }
  b.epoch = epoch;
  b.index = batch_index;
  b.indices.assign(order.begin() + begin, order.begin() + begin + n);
  TagScope tag(MemTag::Data);
  try {
    if (text_ != nullptr) {
      b.images = empty_host({n, text_->seq_len()}, DType::i64, MemTag::Data, options_.host_memory);  // (N, T) tokens
      // (N, T) next bytes, or masked-language-model targets
      b.labels = empty_host({n, text_->seq_len()}, DType::i64, MemTag::Data, options_.host_memory);
    } else if (classes_ != nullptr) {
      b.images = empty_host({n, classes_->seq_len()}, DType::i64, MemTag::Data, options_.host_memory);  // (N, T) tokens
      b.labels = empty_host({n}, DType::i64, MemTag::Data, options_.host_memory);                       // (N) classes
    } else {
      b.images = empty_host({n, out_shape_.c, out_shape_.h, out_shape_.w}, DType::f32, MemTag::Data,
                            options_.host_memory);                                          // (N, C, H, W)
      b.labels = empty_host({n}, DType::i64, MemTag::Data, options_.host_memory);  // (N)
    }
  } catch (const std::bad_alloc&) {
    throw out_of_host_memory();
  }
  return b;
}

void Loader::fill_batch(Batch& b) const {
  if (text_ != nullptr) return fill_token_batch(b);
  if (classes_ != nullptr) return fill_class_token_batch(b);
  const auto n = static_cast<int64_t>(b.indices.size());
  float* images = b.images.data<float>();      // (N, C, H, W)
  int64_t* labels = b.labels.data<int64_t>();  // (N)
  const int64_t per = out_shape_.numel();

  // Samples [lo, hi) of the batch; with threads > 1 the batch is cut into contiguous chunks, one
  // per std::thread (plain threads: an OpenMP team here would spin against the trainer's own).
  std::vector<std::exception_ptr> errors(static_cast<size_t>(options_.threads));
  auto work = [&](int t, int64_t lo, int64_t hi) {
    try {
      std::vector<uint8_t> pixels(static_cast<size_t>(in_shape_.numel()));  // (C, H, W)
      std::vector<float> scratch;
      for (int64_t i = lo; i < hi; ++i) {
        const int64_t k = b.indices[i];
        labels[i] = dataset_->get(k, pixels.data());
        pipeline_.run(pixels.data(), in_shape_, images + i * per, options_.seed, b.epoch, k, scratch);
      }
    } catch (const std::bad_alloc&) {
      errors[t] = std::make_exception_ptr(out_of_host_memory());
    } catch (...) {
      errors[t] = std::current_exception();
    }
  };
  const int threads = static_cast<int>(std::min<int64_t>(options_.threads, n));
  std::vector<std::thread> helpers;
  for (int t = 1; t < threads; ++t) helpers.emplace_back(work, t, n * t / threads, n * (t + 1) / threads);
  work(0, 0, n / threads);
  for (std::thread& h : helpers) h.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

void Loader::fill_token_batch(Batch& b) const {
  const auto n = static_cast<int64_t>(b.indices.size());
  const int64_t t = text_->seq_len();
  int64_t* tokens = b.images.data<int64_t>();   // (N, T)
  int64_t* targets = b.labels.data<int64_t>();  // (N, T)
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* w = text_->window(b.indices[i]);  // T + 1 bytes
    if (options_.masked_lm) {
      const int64_t epoch = options_.fixed_masks ? 0 : b.epoch;
      mask_window(w, t, options_.seed, epoch, b.indices[i], tokens + i * t, targets + i * t);
      continue;
    }
    for (int64_t j = 0; j < t; ++j) {
      tokens[i * t + j] = w[j];
      targets[i * t + j] = w[j + 1];
    }
  }
}

void Loader::fill_class_token_batch(Batch& b) const {
  const auto n = static_cast<int64_t>(b.indices.size());
  const int64_t t = classes_->seq_len();
  int64_t* tokens = b.images.data<int64_t>();  // (N, T)
  int64_t* labels = b.labels.data<int64_t>();  // (N)
  std::vector<uint8_t> bytes(static_cast<size_t>(t));  // (T)
  for (int64_t i = 0; i < n; ++i) {
    labels[i] = classes_->get(b.indices[i], bytes.data());
    for (int64_t j = 0; j < t; ++j) tokens[i * t + j] = bytes[static_cast<size_t>(j)];
  }
}

void Loader::queue_next_slot() {
  Slot slot;
  try {
    slot.batch = allocate_batch(order_, epoch_, next_slot_);
  } catch (...) {
    slot.error = std::current_exception();  // reaches the caller after the batches before it
  }
  ++next_slot_;
  std::lock_guard lock(mutex_);
  todo_.push_back(std::move(slot));
  cv_.notify_all();
}

void Loader::produce(int64_t last_batch) {
  for (;;) {
    Slot slot;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] { return cancel_ || !todo_.empty(); });
      if (cancel_) return;
      slot = std::move(todo_.front());
      todo_.pop_front();
    }
    if (!slot.error) {
      try {
        fill_batch(slot.batch);
      } catch (...) {
        slot.error = std::current_exception();
      }
    }
    std::lock_guard lock(mutex_);
    if (cancel_) return;
    if (slot.error) {
      error_ = slot.error;
      done_ = true;
    } else {
      done_ = slot.batch.index == last_batch;
      ready_.push_back(std::move(slot.batch));
    }
    cv_.notify_all();
    if (done_) return;
  }
}

void Loader::stop() {
  {
    std::lock_guard lock(mutex_);
    cancel_ = true;
    cv_.notify_all();
  }
  if (worker_.joinable()) worker_.join();
  std::lock_guard lock(mutex_);
  ready_.clear();
  todo_.clear();
  started_ = false;
  done_ = false;
  cancel_ = false;
  error_ = nullptr;
}

void Loader::start_epoch(int64_t epoch, int64_t first_batch) {
  PACKRAT_CHECK(epoch >= 0, "loader {}: epoch {} must not be negative", dataset_->name(), epoch);
  PACKRAT_CHECK(first_batch >= 0 && first_batch <= batches_per_epoch(),
                "loader {}: cannot start at batch {} of an epoch of {} batches", dataset_->name(), first_batch,
                batches_per_epoch());
  stop();
  started_ = true;
  order_ = order(epoch);
  epoch_ = epoch;
  next_slot_ = first_batch;
  if (first_batch == batches_per_epoch()) {  // nothing left of the epoch
    done_ = true;
    return;
  }
  for (int64_t k = 0; k < options_.prefetch && next_slot_ < batches_per_epoch(); ++k) queue_next_slot();
  worker_ = std::thread([this] { produce(batches_per_epoch() - 1); });
}

bool Loader::next(Batch& batch) {
  std::unique_lock lock(mutex_);
  PACKRAT_CHECK(started_, "loader {}: next() called before start_epoch()", dataset_->name());
  cv_.wait(lock, [&] { return !ready_.empty() || done_; });
  if (!ready_.empty()) {
    batch = std::move(ready_.front());
    ready_.pop_front();
    lock.unlock();
    if (next_slot_ < batches_per_epoch()) queue_next_slot();
    return true;
  }
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
  return false;
}

}  // namespace packrat::data
