// The MPI communicator: nonblocking collectives (MPI_Iallreduce, MPI_Ibcast, ...) completed by a
// polling wait with a deadline, so that a dead or hung peer ends in a CommunicatorError naming it
// rather than in a hang. The only file that includes mpi.h.
//
// Naming the missing rank: a collective cannot say who has not arrived, so a rank whose wait
// times out asks every other rank, on a second communicator, which collective it is in; every
// waiting rank answers such questions while it polls. A rank that does not answer within a grace
// period is dead or hung outside a collective; one that answers with an earlier collective is
// stuck there (a mismatch of the order of collectives).
#include <mpi.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <deque>
#include <thread>

#include "distributed/mpi/mpi_world.h"

namespace packrat::dist {

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kQuestionTag = 7101, kAnswerTag = 7102;

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return std::string(text, static_cast<size_t>(len));
}

std::string library_version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(text, &len);
  std::string v(text, static_cast<size_t>(len));
  if (auto nl = v.find_first_of(",\n"); nl != std::string::npos) v.resize(nl);
  return v;
}

class MpiCommunicator;

class MpiPendingReduce : public PendingReduce {
 public:
  MpiPendingReduce(MpiCommunicator& c, MPI_Request r, int64_t seq, std::string what)
      : comm_(c), request_(r), seq_(seq), what_(std::move(what)) {}
  ~MpiPendingReduce() override;
  bool test() override;
  void wait() override;

 private:
  MpiCommunicator& comm_;
  MPI_Request request_;
  int64_t seq_;
  std::string what_;
  bool done_ = false;
};

class MpiCommunicator : public Communicator {
 public:
  explicit MpiCommunicator(double timeout_s) : timeout_s_(timeout_s) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      // Only the trainer's main thread calls MPI.
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
      owns_init_ = true;
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
    MPI_Comm_dup(MPI_COMM_WORLD, &control_);
    // Errors come back as codes (and become CommunicatorErrors) instead of aborting the job.
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(control_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    MPI_Comm local;
    MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local);
    MPI_Comm_rank(local, &local_rank_);
    MPI_Comm_size(local, &local_size_);
    MPI_Comm_free(&local);
    name_ = "mpi (" + library_version() + ")";
  }

  ~MpiCommunicator() override {
    // After a failure a peer may be dead: MPI_Finalize could wait for it forever, so the process
    // ends without it (the launcher reports that; the exit code is the trainer's).
    if (failed_ || !owns_init_) return;
    MPI_Comm_free(&control_);
    MPI_Comm_free(&comm_);
    MPI_Finalize();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }
  std::string_view backend_name() const override { return name_; }
  double timeout_s() const override { return timeout_s_; }

  void all_reduce_sum(float* data, int64_t count, std::string_view what) override {
    const int64_t seq = next_seq();
    MPI_Request r;
    check(MPI_Iallreduce(MPI_IN_PLACE, data, int_count(count, what), MPI_FLOAT, MPI_SUM, comm_, &r), seq, what);
    wait(r, seq, what);
  }
  void all_reduce_sum(double* data, int64_t count, std::string_view what) override {
    const int64_t seq = next_seq();
    MPI_Request r;
    check(MPI_Iallreduce(MPI_IN_PLACE, data, int_count(count, what), MPI_DOUBLE, MPI_SUM, comm_, &r), seq, what);
    wait(r, seq, what);
  }
  std::unique_ptr<PendingReduce> start_all_reduce_sum(float* data, int64_t count, std::string what) override {
    const int64_t seq = next_seq();
    MPI_Request r;
    check(MPI_Iallreduce(MPI_IN_PLACE, data, int_count(count, what), MPI_FLOAT, MPI_SUM, comm_, &r), seq, what);
    pending_.push_back(r);
    return std::make_unique<MpiPendingReduce>(*this, r, seq, std::move(what));
  }
  void progress() override {
    answer_questions();
    // MPI_Test on any started request makes Open MPI's progress engine advance all of them.
    for (MPI_Request& r : pending_) {
      int flag = 0;
      MPI_Request copy = r;  // the request stays owned by its PendingReduce
      MPI_Request_get_status(copy, &flag, MPI_STATUS_IGNORE);
    }
  }
  void broadcast(void* data, int64_t bytes, int root, std::string_view what) override {
    const int64_t seq = next_seq();
    MPI_Request r;
    check(MPI_Ibcast(data, int_count(bytes, what), MPI_BYTE, root, comm_, &r), seq, what);
    wait(r, seq, what);
  }
  std::vector<std::string> gather(const std::string& mine, int root, std::string_view what) override {
    int len = int_count(static_cast<int64_t>(mine.size()), what);
    std::vector<int> lens(rank_ == root ? static_cast<size_t>(size_) : 0);
    {
      const int64_t seq = next_seq();
      MPI_Request r;
      check(MPI_Igather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, root, comm_, &r), seq, what);
      wait(r, seq, what);
    }
    std::vector<int> offsets(lens.size());
    std::string all;
    if (rank_ == root) {
      int64_t total = 0;
      for (size_t i = 0; i < lens.size(); ++i) {
        offsets[i] = static_cast<int>(total);
        total += lens[i];
      }
      all.resize(static_cast<size_t>(int_count(total, what)));
    }
    const int64_t seq = next_seq();
    MPI_Request r;
    check(MPI_Igatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), offsets.data(), MPI_CHAR, root, comm_, &r),
          seq, what);
    wait(r, seq, what);
    std::vector<std::string> out;
    for (size_t i = 0; i < lens.size(); ++i) out.push_back(all.substr(static_cast<size_t>(offsets[i]), static_cast<size_t>(lens[i])));
    return out;
  }
  void barrier(std::string_view what) override {
    const int64_t seq = next_seq();
    MPI_Request r;
    check(MPI_Ibarrier(comm_, &r), seq, what);
    wait(r, seq, what);
  }

  // Polls until r completes; on the deadline, finds out who is missing and throws.
  void wait(MPI_Request& r, int64_t seq, std::string_view what) {
    const MPI_Request original = r;
    const auto start = Clock::now();
    const auto deadline = start + std::chrono::duration<double>(timeout_s_);
    int polls = 0;
    for (;;) {
      int flag = 0;
      MPI_Status status;
      check(MPI_Test(&r, &flag, &status), seq, what);
      if (flag) break;
      answer_questions();
      if (Clock::now() > deadline) fail_missing(seq, what);
      // Spin briefly (a reduction on shared memory takes microseconds), then yield the core:
      // ranks share the processors with their own OpenMP threads.
      if (++polls > 200) std::this_thread::sleep_for(std::chrono::microseconds(polls > 2000 ? 500 : 50));
    }
    pending_.erase(std::remove(pending_.begin(), pending_.end(), original), pending_.end());
  }

  void mark_failed() override { failed_ = true; }

 private:
  int64_t next_seq() {
    ++seq_;
    current_seq_ = seq_;
    return seq_;
  }

  int int_count(int64_t n, std::string_view what) const {
    PACKRAT_CHECK(n >= 0 && n <= INT_MAX, "{}: {} elements are more than one MPI call takes (2^31 - 1)", what, n);
    return static_cast<int>(n);
  }

  void check(int code, int64_t seq, std::string_view what) {
    if (code == MPI_SUCCESS) return;
    failed_ = true;
    throw CommunicatorError(fmt::format("rank {}: {} (collective #{}) failed in MPI: {} (a peer rank died?)", rank_,
                                        what, seq, mpi_error_string(code)));
  }

  // Answers "which collective are you in?" from ranks whose wait timed out.
  void answer_questions() {
    for (;;) {
      int flag = 0;
      MPI_Status st;
      if (MPI_Iprobe(MPI_ANY_SOURCE, kQuestionTag, control_, &flag, &st) != MPI_SUCCESS || !flag) return;
      int64_t their = 0;
      MPI_Recv(&their, 1, MPI_INT64_T, st.MPI_SOURCE, kQuestionTag, control_, MPI_STATUS_IGNORE);
      MPI_Request r;
      answers_.push_back(current_seq_);
      MPI_Isend(&answers_.back(), 1, MPI_INT64_T, st.MPI_SOURCE, kAnswerTag, control_, &r);
      MPI_Request_free(&r);
    }
  }

  [[noreturn]] void fail_missing(int64_t seq, std::string_view what) {
    failed_ = true;
    // Ask everyone; answers arrive from the ranks that are polling in some collective.
    const double grace = std::clamp(timeout_s_ / 4, 0.5, 5.0);
    std::vector<int64_t> answer(static_cast<size_t>(size_), -1);
    std::vector<MPI_Request> recvs(static_cast<size_t>(size_), MPI_REQUEST_NULL);
    int64_t question = seq;
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      MPI_Request s;
      MPI_Isend(&question, 1, MPI_INT64_T, p, kQuestionTag, control_, &s);
      MPI_Request_free(&s);
      MPI_Irecv(&answer[static_cast<size_t>(p)], 1, MPI_INT64_T, p, kAnswerTag, control_, &recvs[static_cast<size_t>(p)]);
    }
    const auto until = Clock::now() + std::chrono::duration<double>(grace);
    std::vector<bool> answered(static_cast<size_t>(size_), false);
    answered[static_cast<size_t>(rank_)] = true;
    while (Clock::now() < until) {
      bool all = true;
      for (int p = 0; p < size_; ++p) {
        if (answered[static_cast<size_t>(p)]) continue;
        int flag = 0;
        MPI_Test(&recvs[static_cast<size_t>(p)], &flag, MPI_STATUS_IGNORE);
        answered[static_cast<size_t>(p)] = flag != 0;
        all = all && flag;
      }
      if (all) break;
      answer_questions();
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    std::vector<std::string> missing;
    for (int p = 0; p < size_; ++p) {
      const int64_t a = answer[static_cast<size_t>(p)];
      if (!answered[static_cast<size_t>(p)])
        missing.push_back(fmt::format("rank {} did not answer (dead, or hung outside a collective)", p));
      else if (p != rank_ && a < seq)
        missing.push_back(fmt::format("rank {} is still in collective #{}", p, a));
    }
    if (missing.empty()) missing.push_back("every rank answered from this collective or a later one; the network is stuck");
    std::string list;
    for (const std::string& m : missing) list += (list.empty() ? "" : "; ") + m;
    throw CommunicatorError(fmt::format("rank {}: {} (collective #{}) did not complete within distributed.timeout_s = "
                                        "{:g} s: {}",
                                        rank_, what, seq, timeout_s_, list));
  }

  friend class MpiPendingReduce;
  MPI_Comm comm_ = MPI_COMM_NULL, control_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  double timeout_s_;
  bool owns_init_ = false, failed_ = false;
  int64_t seq_ = 0, current_seq_ = 0;
  std::vector<MPI_Request> pending_;
  std::deque<int64_t> answers_;  // buffers of answers in flight (stable addresses)
  std::string name_;
};

MpiPendingReduce::~MpiPendingReduce() {
  // An abandoned reduction (an exception in the backward pass) cannot be cancelled in MPI; the
  // run is ending, so the request is left to MPI.
}

bool MpiPendingReduce::test() {
  if (done_) return true;
  int flag = 0;
  const MPI_Request original = request_;  // MPI_Test sets request_ to MPI_REQUEST_NULL when done
  comm_.check(MPI_Test(&request_, &flag, MPI_STATUS_IGNORE), seq_, what_);
  if (flag) {
    done_ = true;
    comm_.pending_.erase(std::remove(comm_.pending_.begin(), comm_.pending_.end(), original), comm_.pending_.end());
  }
  return done_;
}

void MpiPendingReduce::wait() {
  if (done_) return;
  comm_.wait(request_, seq_, what_);
  done_ = true;
}

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(double timeout_s) {
  return std::make_unique<MpiCommunicator>(timeout_s);
}

}  // namespace packrat::dist
