#pragma once
// Batches for the trainer, prepared on a background thread while the trainer computes. Their
// memory is allocated on the caller's thread (the current batch and `prefetch` after it), so the
// memory a run reports is the same from run to run.
//
//   Loader train(dataset, parse_pipeline({"random_crop(32, 4)", "hflip", "normalize(cifar10)"}),
//                {.batch_size = 128, .shuffle = true, .seed = cfg.seed, .limit = cfg.limit_train});
//   for (int64_t epoch = start; epoch < epochs; ++epoch) {
//     train.start_epoch(epoch);
//     for (Batch b; train.next(b);) step(b.images, b.labels);
//   }
//
// Order: epoch e visits the samples in order(e), a Fisher-Yates shuffle driven by
// Philox(seed, kShuffleStream | e), so it depends on (seed, epoch) only: resuming at epoch k
// (or at batch j of epoch k, with start_epoch(k, j)) reproduces the uninterrupted run exactly,
// augmentations included (see transforms.h). Without shuffle the order is 0, 1, 2, ...
// Subset: `limit` keeps the first `limit` samples of the dataset in its file order (the same
// subset for every seed); the shuffle then permutes that subset.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/tensor.h"
#include "data/dataset.h"
#include "data/transforms.h"

namespace packrat::data {

struct LoaderOptions {
  int64_t batch_size = 128;
  bool shuffle = true;
  bool drop_last = false;  // drop a last batch smaller than batch_size
  uint64_t seed = 0;       // shuffle and augmentation
  int64_t limit = 0;       // use only the first `limit` samples (0 or >= size: all)
  int64_t prefetch = 2;    // batches prepared ahead of the consumer
  int threads = 1;         // threads preparing one batch (the background thread and threads - 1 helpers)
  // Data-parallel shards (rank shard_index of shard_count). split_batches: every batch of
  // batch_size (the global batch) is cut into shard_count contiguous parts and this loader yields
  // part shard_index, so the ranks together see exactly the batches one process would. Otherwise
  // the epoch's order is cut into shard_count contiguous parts and this loader batches its own.
  int shard_index = 0, shard_count = 1;
  bool split_batches = true;
  // Where batches are allocated (nullptr: the CPU allocator); a GPU run passes page-locked memory
  // (core/device_runtime.h). Batches are host tensors either way.
  Allocator* host_memory = nullptr;
  // A text dataset only: masked-language-model samples (data/masked_lm.h: BERT's masking keyed by
  // seed, epoch and sample index) instead of next-byte targets; fixed_masks draws every epoch's
  // masks as epoch 0's (evaluation: the same masked positions every time).
  bool masked_lm = false;
  bool fixed_masks = false;
};

// A text dataset (data/text.h) gives token batches: images are the tokens (N, T) i64 and
// labels the next-byte targets (N, T) i64, or with masked_lm BERT's masked tokens and targets
// (-100 where nothing is predicted). A text_classes dataset (data/text_classes.h) gives tokens
// (N, T) i64 and class labels (N) i64. Neither takes transforms.
struct Batch {
  Tensor images;                 // (N, C, H, W) f32 plain, tag Data; text, text_classes: (N, T) i64 tokens
  Tensor labels;                 // (N) i64, tag Data; text: (N, T) i64 targets
  std::vector<int64_t> indices;  // (N) dataset index of each sample
  int64_t global_size = 0;       // samples of the whole batch across shards (split_batches), else N
  int64_t epoch = 0;
  int64_t index = 0;             // batch number within the epoch
};

class TextDataset;
class TextClassesDataset;

constexpr uint64_t kShuffleStream = 0x5A0FFull << 40;

class Loader {
 public:
  Loader(std::shared_ptr<const Dataset> dataset, Pipeline pipeline, LoaderOptions options);
  ~Loader();  // stops and joins the background thread
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  const Dataset& dataset() const { return *dataset_; }
  const LoaderOptions& options() const { return options_; }
  int64_t size() const { return size_; }  // samples per epoch, after the limit
  int64_t batches_per_epoch() const;
  ImageShape image_shape() const { return out_shape_; }  // (C, H, W) of a batch image

  // Dataset indices in the order epoch `epoch` visits them (size() entries).
  std::vector<int64_t> order(int64_t epoch) const;

  // Starts preparing the batches of `epoch` from batch `first_batch` on; abandons any epoch
  // still in progress.
  void start_epoch(int64_t epoch, int64_t first_batch = 0);
  // The next batch of the current epoch; false when the epoch is done. Rethrows an error of
  // the background thread (a corrupt image, say).
  bool next(Batch& batch);
  // Stops the background thread and drops prepared batches (also done by the destructor).
  void stop();

 private:
  // A batch's samples and its empty tensors (tag Data).
  Batch allocate_batch(const std::vector<int64_t>& order, int64_t epoch, int64_t batch_index) const;
  void fill_batch(Batch& b) const;        // its images and labels, from b.indices (the background thread)
  void fill_token_batch(Batch& b) const;  // the same for a text dataset
  void fill_class_token_batch(Batch& b) const;  // and for a text_classes dataset
  Error out_of_host_memory() const;
  // Allocates batch next_slot_ of the epoch and hands it to the background thread to fill. Called
  // on the caller's thread only (start_epoch: the first `prefetch`; next: one for each batch
  // taken), so that the Data bytes alive at any point of a training step do not depend on the
  // background thread's timing: a run's memory peaks repeat exactly. (Allocated by the thread
  // itself, the next batch did or did not exist at a step's peak, by a race.)
  void queue_next_slot();
  void produce(int64_t last_batch);  // fills the queued slots until the epoch's last batch
  // End of shard `shard`'s part of the epoch (shard -1: 0), over the samples after the limit.
  int64_t shard_end(int shard) const;

  struct Slot {
    Batch batch;                // allocated, to be filled
    std::exception_ptr error;   // allocating it failed: delivered after the batches before it
  };

  std::shared_ptr<const Dataset> dataset_;
  const TextDataset* text_ = nullptr;  // dataset_ when it is a text dataset
  const TextClassesDataset* classes_ = nullptr;  // dataset_ when it is a text_classes dataset
  Pipeline pipeline_;
  LoaderOptions options_;
  int64_t size_ = 0;
  ImageShape in_shape_, out_shape_;

  std::thread worker_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Slot> todo_;      // allocated batches the background thread has yet to fill
  std::deque<Batch> ready_;    // filled batches next() has yet to take
  std::vector<int64_t> order_;  // the current epoch's order(epoch_)
  int64_t epoch_ = 0, next_slot_ = 0;  // next_slot_: the next batch to allocate (caller's thread)
  bool started_ = false, done_ = false, cancel_ = false;
  std::exception_ptr error_;
};

}  // namespace packrat::data
