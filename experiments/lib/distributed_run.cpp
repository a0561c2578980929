#include "experiments/lib/distributed_run.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <sstream>

#include "autograd/batchnorm_sync.h"
#include "core/backend.h"
#include "core/parallel.h"
#include "experiments/lib/json.h"
#include "experiments/lib/safetensors.h"

namespace packrat {

namespace {

// FNV-1a, 64 bits: the config's fingerprint (a mismatch check, not security).
uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : s) {
    h ^= ch;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string first_difference(const std::string& a, const std::string& b) {
  std::istringstream sa(a), sb(b);
  std::string la, lb;
  for (int line = 1;; ++line) {
    const bool ga = static_cast<bool>(std::getline(sa, la)), gb = static_cast<bool>(std::getline(sb, lb));
    if (!ga && !gb) return "no line differs";
    if (la != lb || ga != gb)
      return fmt::format("line {} of the resolved config: rank 0 has '{}', it has '{}'", line, ga ? la : "",
                         gb ? lb : "");
  }
}

// Every rank learns whether all resolved the same config; the error (on every rank) names the
// ranks that differ from rank 0 and the first differing line.
void check_same_config(dist::Communicator& comm, const Config& c) {
  const std::string yaml = config_to_yaml(c);
  const std::vector<std::string> all = comm.gather(yaml, 0, "config check");
  std::string problem;
  if (comm.rank() == 0) {
    for (size_t r = 1; r < all.size(); ++r)
      if (fnv1a(all[r]) != fnv1a(all[0]))
        problem += fmt::format("{}rank {} ({})", problem.empty() ? "" : "; ", r, first_difference(all[0], all[r]));
  }
  problem = dist::broadcast_string(comm, problem, 0, "config check");
  PACKRAT_CHECK(problem.empty(), "distributed: the ranks resolved different configs (hash of the resolved config): {}; "
                "give every rank the same --config and --set arguments", problem);
}

// Plain tensors <-> bytes, for GACT's state (name, dtype, shape, data).
std::string pack_tensors(const std::vector<std::pair<std::string, Tensor>>& ts) {
  std::string out;
  auto put = [&](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); };
  const int64_t count = static_cast<int64_t>(ts.size());
  put(&count, sizeof count);
  for (const auto& [name, t0] : ts) {
    const Tensor t = t0.to(Device::cpu()).to_plain();
    const int64_t len = static_cast<int64_t>(name.size()), rank = t.rank();
    const uint8_t dtype = static_cast<uint8_t>(t.dtype());
    put(&len, sizeof len);
    put(name.data(), name.size());
    put(&dtype, 1);
    put(&rank, sizeof rank);
    for (int64_t d : t.shape().dims()) put(&d, sizeof d);
    put(t.raw(), t.nbytes());
  }
  return out;
}

std::vector<std::pair<std::string, Tensor>> unpack_tensors(const std::string& s) {
  size_t pos = 0;
  auto get = [&](void* p, size_t n) {
    PACKRAT_CHECK(pos + n <= s.size(), "distributed: GACT state from rank 0 is truncated");
    std::memcpy(p, s.data() + pos, n);
    pos += n;
  };
  int64_t count = 0;
  get(&count, sizeof count);
  std::vector<std::pair<std::string, Tensor>> out;
  for (int64_t i = 0; i < count; ++i) {
    int64_t len = 0, rank = 0;
    uint8_t dtype = 0;
    get(&len, sizeof len);
    std::string name(static_cast<size_t>(len), '\0');
    get(name.data(), name.size());
    get(&dtype, 1);
    get(&rank, sizeof rank);
    std::vector<int64_t> dims(static_cast<size_t>(rank));
    for (int64_t& d : dims) get(&d, sizeof d);
    TagScope tag(MemTag::OptimizerState);
    Tensor t = Tensor::empty(Shape(dims), static_cast<DType>(dtype), Layout::Plain, MemTag::OptimizerState, Device::cpu());
    get(t.raw(), t.nbytes());
    out.emplace_back(std::move(name), std::move(t));
  }
  return out;
}

}  // namespace

bool data_parallel_requested() { return dist::launched_by_mpi_launcher(); }

int threads_per_rank(int host_processors, int usable_processors, int ranks_on_host) {
  const int per_rank = std::max(1, host_processors / std::max(1, ranks_on_host));
  return std::max(1, std::min(per_rank, usable_processors));
}

std::unique_ptr<DataParallel> start_data_parallel(const Config& c, Config& resolved) {
  dist::CommunicatorOptions o;
  o.backend = c.distributed.backend;
  o.cuda_tensors = c.device.rfind("cuda", 0) == 0;  // cuda or cuda:N
  if (o.cuda_tensors && c.device != "cuda") o.cuda_device = Device::parse(c.device).index;  // "cuda": the local rank
  o.timeout_s = c.distributed.timeout_s;
  auto dp = std::make_unique<DataParallel>();
  dp->comm = dist::make_communicator(o);
  dist::Communicator& comm = *dp->comm;
  // Every line this rank logs says which rank it is.
  spdlog::set_pattern(fmt::format("[%H:%M:%S] [rank {}] %v", comm.rank()));
  check_same_config(comm, c);
  PACKRAT_CHECK(c.data.batch_size % comm.size() == 0,
                "{}: data.batch_size is {}, which does not split evenly over {} data-parallel ranks (it is the global "
                "batch; each rank trains on data.batch_size / ranks): use a multiple of {}",
                c.source, c.data.batch_size, comm.size(), comm.size());
  resolved = c;
  // device: cuda means one GPU per rank: the rank's index among the ranks on its host (as NCCL chose).
  if (c.device == "cuda" && comm.size() > 1) resolved.device = fmt::format("cuda:{}", comm.local_rank());
  const int host = static_cast<int>(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)));
  const int usable = std::max(1, omp_get_num_procs());
  if (c.threads > 0) {
    if (c.threads * comm.local_size() > host)
      spdlog::warn("threads: {} per rank x {} ranks on this host is more than its {} processors: the ranks' threads "
                   "will wait on each other (threads: 0 chooses {} per rank)",
                   c.threads, comm.local_size(), host, threads_per_rank(host, usable, comm.local_size()));
  } else {
    resolved.threads = threads_per_rank(host, usable, comm.local_size());
  }
  spdlog::info("data-parallel: rank {} of {} on {}, {} rank(s) on this host of {} processors ({} usable by this rank): "
               "{} OpenMP thread(s) per rank ({}); batch {} per rank of global {}",
               comm.rank(), comm.size(), comm.backend_name(), comm.local_size(), host, usable, resolved.threads,
               c.threads > 0 ? "threads in the config" : "chosen", c.data.batch_size / comm.size(), c.data.batch_size);
  return dp;
}

void broadcast_model(DataParallel& dp, Module& model) {
  // Through host memory: the broadcast is MPI's, once at the start.
  auto send = [&](const std::vector<std::pair<std::string, Tensor>>& named) {
    for (const auto& [name, t] : named) {
      Tensor x = t;
      Tensor host = x.to_plain().to(Device::cpu());  // (a GPU's KRSC weight comes back plain)
      dp.comm->broadcast(host.raw(), static_cast<int64_t>(host.nbytes()), 0, "initial " + name);
      if (!host.same_storage(x)) backend_of(x).copy(host.to(x.device()).to_layout(x.layout()), x);
      x.bump_version();
    }
  };
  send(model.named_parameters());
  send(model.named_buffers());
}

void sum_over_ranks(DataParallel& dp, std::vector<double>& values, std::string_view what) {
  dp.comm->all_reduce_sum(values.data(), static_cast<int64_t>(values.size()), what);
}

DataParallelStep::DataParallelStep(DataParallel& dp, Module& model, const DistributedConfig& c)
    : dp_(dp), reducer_(*dp.comm, model.parameters(), dist::ReducerOptions{c.bucket_bytes, c.overlap}) {}

void DataParallelStep::before_backward(int64_t local, int64_t global) {
  PACKRAT_CHECK(local > 0 && global >= local, "data-parallel step: {} of {} samples", local, global);
  reducer_.begin(static_cast<double>(local) / static_cast<double>(global));
}

void DataParallelStep::after_backward() { reducer_.finish(); }

void DataParallelStep::abandon() { reducer_.abandon(); }

void DataParallelStep::after_store_refresh(SavedTensorStore& store) {
  // Each rank measured on its own shard (GACT: sensitivities); rank 0's decision holds everywhere.
  const std::string_view name = store.state_name();
  std::string state = dp_.root() ? pack_tensors(store.export_state()) : std::string();
  state = dist::broadcast_string(*dp_.comm, std::move(state), 0, fmt::format("{} state", name));
  if (!dp_.root()) store.import_state(unpack_tensors(state), fmt::format("rank 0's {} refresh", name));
}

DataParallelSession::DataParallelSession(DataParallel* dp, Module& model, const DistributedConfig& c) {
  if (!dp) return;
  broadcast_model(*dp, model);
  step_ = std::make_unique<DataParallelStep>(*dp, model, c);
  sync_bn_.emplace(*dp, c.sync_batchnorm);
}

SyncBatchnormScope::SyncBatchnormScope(DataParallel& dp, bool enabled) : enabled_(enabled) {
  if (!enabled_) return;
  auto sync = std::make_shared<BatchnormSync>();
  dist::Communicator* comm = dp.comm.get();
  sync->sum = [comm](double* data, int64_t count, std::string_view what) { comm->all_reduce_sum(data, count, what); };
  set_batchnorm_sync(std::move(sync));
}

SyncBatchnormScope::~SyncBatchnormScope() {
  if (enabled_) set_batchnorm_sync(nullptr);
}

std::string gather_memory_reports(DataParallel& dp, const MemoryReport& mine, const std::string& dir) {
  Json row = Json::object();
  row["rank"] = Json(static_cast<int64_t>(dp.rank()));
  row["batch_size"] = Json(mine.batch_size);
  row["saved_bytes"] = Json(mine.saved_bytes);
  row["allocator_saved_bytes"] = Json(mine.allocator_saved_bytes);
  row["saved_fp32_bytes"] = Json(mine.saved_fp32_bytes);
  row["peak_bytes"] = Json(mine.step.total_peak);
  Json tags = Json::object();
  for (size_t t = 0; t < kNumTags; ++t) tags[std::string(tag_name(static_cast<MemTag>(t)))] = Json(mine.step.peak[t]);
  row["peak_by_tag"] = tags;
  const std::vector<std::string> rows = dp.comm->gather(row.dump(), 0, "memory report");
  if (!dp.root()) return "";
  Json all = Json::array();
  std::string table = fmt::format("{:>5} {:>6} {:>14} {:>14} {:>14} {:>14}\n", "rank", "batch", "saved", "saved (alloc)",
                                  "saved fp32", "peak");
  for (const std::string& r : rows) {
    Json j = parse_json(r, "memory report of a rank");
    table += fmt::format("{:>5} {:>6} {:>14} {:>14} {:>14} {:>14}\n", j["rank"].get<int64_t>(),
                         j["batch_size"].get<int64_t>(), format_bytes(j["saved_bytes"].get<int64_t>()),
                         format_bytes(j["allocator_saved_bytes"].get<int64_t>()),
                         format_bytes(j["saved_fp32_bytes"].get<int64_t>()), format_bytes(j["peak_bytes"].get<int64_t>()));
    all.push_back(std::move(j));
  }
  Json doc = Json::object();
  doc["ranks"] = all;
  write_file_atomic(dir + "/memory_report_ranks.json", doc.dump(2) + "\n");
  return "memory per rank (first step):\n" + table;
}

}  // namespace packrat
