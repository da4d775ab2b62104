#include "app/expert_parallel.h"

#include <chrono>
#include <climits>
#include <cstring>
#include <exception>
#include <string>
#include <thread>

#include "common/error.h"
#include "core/engine.h"

#ifdef SLUICE_HAVE_MPI
// The C API only: Open MPI's mpi.h would otherwise pull in its deprecated C++ bindings.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace sluice::core {

#ifdef SLUICE_HAVE_MPI

namespace {
bool g_active = false;  // MPI initialised by an ExpertParallel and not yet finalised
int g_size = 1;

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw Error(ErrorCode::internal, std::string(what) + " failed: " + std::string(text, static_cast<size_t>(len)));
}
}  // namespace

// Allgatherv of the (token, slot) rows, in place: rank r's rows sit at displs[r] of the scratch,
// in slot order; every rank knows every count because every rank knows the routing. begin()
// packs this rank's rows and starts an MPI_Iallgatherv; finish() waits for it and unpacks the
// other ranks' rows, so what the caller computes between the two (the shared expert) overlaps
// the transfer as far as the MPI library progresses it in the background.
class ExpertParallel::Exchange final : public ExpertExchange {
 public:
  explicit Exchange(const ExpertPartition& p)
      : partition_(p), counts_(static_cast<size_t>(p.n_ranks)), displs_(static_cast<size_t>(p.n_ranks)),
        cursor_(static_cast<size_t>(p.n_ranks)) {}
  const ExpertPartition& partition() const override { return partition_; }
  void set_partition(ExpertPartition p) override {
    if (p.n_ranks != partition_.n_ranks || p.rank != partition_.rank)
      throw Error(ErrorCode::internal, "expert partition for rank " + std::to_string(p.rank) + " of " +
                                           std::to_string(p.n_ranks) + " given to rank " +
                                           std::to_string(partition_.rank) + " of " + std::to_string(partition_.n_ranks));
    partition_ = std::move(p);
  }

  void begin(int layer, std::span<const int32_t> ids, int64_t n_embd, std::span<float> rows,
             std::span<float> scratch) override {
    const auto t0 = std::chrono::steady_clock::now();
    const size_t E = static_cast<size_t>(n_embd), n = ids.size();
    if (pending_) throw Error(ErrorCode::internal, "expert exchange begun twice without finish()");
    if (rows.size() < n * E || scratch.size() < n * E || n * E > static_cast<size_t>(INT_MAX))
      throw Error(ErrorCode::internal, "expert exchange of " + std::to_string(n) + " rows of " +
                                           std::to_string(n_embd) + " floats does not fit its buffers");
    std::fill(counts_.begin(), counts_.end(), 0);
    for (int32_t e : ids) counts_[static_cast<size_t>(partition_.owner(layer, e))] += static_cast<int>(E);
    int at = 0;
    for (size_t r = 0; r < counts_.size(); ++r) {
      displs_[r] = at;
      at += counts_[r];
    }
    const int me = partition_.rank;
    float* dst = scratch.data() + displs_[static_cast<size_t>(me)];
    for (size_t i = 0; i < n; ++i) {
      if (partition_.owner(layer, ids[i]) != me) continue;
      std::memcpy(dst, rows.data() + i * E, E * sizeof(float));
      dst += E;
    }
    check(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, scratch.data(), counts_.data(), displs_.data(),
                          MPI_FLOAT, MPI_COMM_WORLD, &request_),
          "MPI_Iallgatherv of expert outputs");
    pending_ = true;
    layer_ = layer, ids_ = ids, E_ = E, rows_ = rows, scratch_ = scratch;
    stats_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  void finish() override {
    if (!pending_) throw Error(ErrorCode::internal, "expert exchange finished without begin()");
    const auto t0 = std::chrono::steady_clock::now();
    pending_ = false;
    check(MPI_Wait(&request_, MPI_STATUS_IGNORE), "MPI_Wait for expert outputs");
    const auto t1 = std::chrono::steady_clock::now();
    const int me = partition_.rank;
    const size_t E = E_, n = ids_.size();
    std::copy(displs_.begin(), displs_.end(), cursor_.begin());
    for (size_t i = 0; i < n; ++i) {
      const size_t r = static_cast<size_t>(partition_.owner(layer_, ids_[i]));
      if (static_cast<int>(r) != me) std::memcpy(rows_.data() + i * E, scratch_.data() + cursor_[r], E * sizeof(float));
      cursor_[r] += static_cast<int>(E);
    }
    const uint64_t mine = static_cast<uint64_t>(counts_[static_cast<size_t>(me)]);
    stats_.calls += 1;
    stats_.rows_sent += mine / E;
    stats_.bytes_received += (n * E - mine) * sizeof(float);
    const auto t2 = std::chrono::steady_clock::now();
    stats_.wait_seconds += std::chrono::duration<double>(t1 - t0).count();
    stats_.seconds += std::chrono::duration<double>(t2 - t0).count();
  }
  const ExchangeStats& stats() const { return stats_; }

 private:
  ExpertPartition partition_;
  std::vector<int> counts_, displs_, cursor_;  // floats, per rank
  ExchangeStats stats_;
  // The exchange in flight between begin() and finish().
  bool pending_ = false;
  MPI_Request request_ = MPI_REQUEST_NULL;
  int layer_ = 0;
  std::span<const int32_t> ids_;
  size_t E_ = 0;
  std::span<float> rows_, scratch_;
};

ExpertParallel::ExpertParallel() {
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (initialised) throw Error(ErrorCode::internal, "MPI is already initialised (one ExpertParallel per process)");
  int provided = 0;
  check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
  g_active = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &partition_.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &partition_.n_ranks);
  g_size = partition_.n_ranks;
  if (provided < MPI_THREAD_SERIALIZED) {
    MPI_Finalize();
    g_active = false;
    throw Error(ErrorCode::unsupported, "this MPI library does not offer MPI_THREAD_SERIALIZED, which --expert-parallel needs");
  }
  exchange_ = std::make_unique<Exchange>(partition_);
}

ExpertParallel::~ExpertParallel() {
  if (!g_active) return;
  // Unwinding an error: the other ranks may wait in a collective, and MPI_Finalize would wait
  // for them. Stay initialised; the CLI prints the error, then abort_expert_parallel() ends the job.
  if (std::uncaught_exceptions() > 0 && g_size > 1) return;
  g_active = false;
  MPI_Finalize();
}

ExpertExchange& ExpertParallel::exchange() { return *exchange_; }
ExchangeStats ExpertParallel::stats() const {
  ExchangeStats s = exchange_->stats();
  s.computed = exchange_->computed();
  return s;
}

void ExpertParallel::broadcast(std::span<std::byte> bytes) {
  if (bytes.size() > static_cast<size_t>(INT_MAX)) throw Error(ErrorCode::internal, "broadcast of more than 2 GiB");
  check(MPI_Bcast(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, 0, MPI_COMM_WORLD), "MPI_Bcast");
}

std::vector<double> ExpertParallel::gather(std::span<const double> values) {
  std::vector<double> all(leader() ? values.size() * static_cast<size_t>(n_ranks()) : 0);
  check(MPI_Gather(values.data(), static_cast<int>(values.size()), MPI_DOUBLE, all.data(),
                   static_cast<int>(values.size()), MPI_DOUBLE, 0, MPI_COMM_WORLD),
        "MPI_Gather");
  return all;
}

void ExpertParallel::barrier() { check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

namespace {
void wait_polling(MPI_Request& request, const char* what) {
  auto nap = std::chrono::microseconds(20);
  for (;;) {
    int done = 0;
    check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), what);
    if (done) return;
    std::this_thread::sleep_for(nap);
    nap = std::min(nap * 2, std::chrono::microseconds(5000));
  }
}
}  // namespace

// The header goes by MPI_Ibcast on both sides (a follower may wait long for it; blocking and
// non-blocking collectives must not be mixed); the arrays follow with MPI_Bcast.
void ExpertParallel::send_header(int64_t n) {
  MPI_Request request;
  check(MPI_Ibcast(&n, 1, MPI_INT64_T, 0, MPI_COMM_WORLD, &request), "MPI_Ibcast of a serve step");
  wait_polling(request, "MPI_Test of a serve step");
}

int64_t ExpertParallel::receive_header() {
  int64_t n = 0;
  MPI_Request request;
  check(MPI_Ibcast(&n, 1, MPI_INT64_T, 0, MPI_COMM_WORLD, &request), "MPI_Ibcast of a serve step");
  wait_polling(request, "MPI_Test of a serve step");
  return n;
}

void ExpertParallel::lead_step(std::span<const int32_t> tokens, std::span<const int32_t> seqs,
                               std::span<const int64_t> positions, std::span<const uint8_t> want_logits) {
  if (n_ranks() == 1) return;
  const int n = static_cast<int>(tokens.size());
  send_header(n);
  check(MPI_Bcast(const_cast<int32_t*>(tokens.data()), n, MPI_INT32_T, 0, MPI_COMM_WORLD), "MPI_Bcast of tokens");
  check(MPI_Bcast(const_cast<int32_t*>(seqs.data()), n, MPI_INT32_T, 0, MPI_COMM_WORLD), "MPI_Bcast of sequences");
  check(MPI_Bcast(const_cast<int64_t*>(positions.data()), n, MPI_INT64_T, 0, MPI_COMM_WORLD), "MPI_Bcast of positions");
  check(MPI_Bcast(const_cast<uint8_t*>(want_logits.data()), n, MPI_UINT8_T, 0, MPI_COMM_WORLD), "MPI_Bcast of rows");
}

void ExpertParallel::end_steps() {
  if (n_ranks() > 1) send_header(-1);
}

uint64_t ExpertParallel::follow_steps(Engine& engine) {
  const size_t cap = static_cast<size_t>(engine.n_batch());
  std::vector<int32_t> tokens(cap), seqs(cap);
  std::vector<int64_t> positions(cap);
  std::vector<uint8_t> want(cap);
  for (uint64_t steps = 0;; ++steps) {
    const int64_t n = receive_header();
    if (n < 0) return steps;
    if (static_cast<size_t>(n) > cap)
      throw Error(ErrorCode::internal, "serve step of " + std::to_string(n) + " tokens exceeds the batch of " + std::to_string(cap));
    const int c = static_cast<int>(n);
    check(MPI_Bcast(tokens.data(), c, MPI_INT32_T, 0, MPI_COMM_WORLD), "MPI_Bcast of tokens");
    check(MPI_Bcast(seqs.data(), c, MPI_INT32_T, 0, MPI_COMM_WORLD), "MPI_Bcast of sequences");
    check(MPI_Bcast(positions.data(), c, MPI_INT64_T, 0, MPI_COMM_WORLD), "MPI_Bcast of positions");
    check(MPI_Bcast(want.data(), c, MPI_UINT8_T, 0, MPI_COMM_WORLD), "MPI_Bcast of rows");
    const size_t m = static_cast<size_t>(n);
    engine.forward_batch({tokens.data(), m}, {seqs.data(), m}, {positions.data(), m}, {want.data(), m});
  }
}

bool built_with_mpi() { return true; }

void abort_expert_parallel(int code) {
  if (g_active && g_size > 1) MPI_Abort(MPI_COMM_WORLD, code);
}

#else  // no MPI

class ExpertParallel::Exchange {};

ExpertParallel::ExpertParallel() {
  throw Error(ErrorCode::unsupported,
              "--expert-parallel needs a sluice built with MPI (install libopenmpi-dev, e.g. scripts/setup, and "
              "rebuild; sanitizer builds leave MPI out)");
}
ExpertParallel::~ExpertParallel() = default;
ExpertExchange& ExpertParallel::exchange() { throw Error(ErrorCode::unsupported, "built without MPI"); }
ExchangeStats ExpertParallel::stats() const { return {}; }
void ExpertParallel::broadcast(std::span<std::byte>) {}
std::vector<double> ExpertParallel::gather(std::span<const double> values) {
  return {values.begin(), values.end()};
}
void ExpertParallel::barrier() {}
void ExpertParallel::lead_step(std::span<const int32_t>, std::span<const int32_t>, std::span<const int64_t>,
                               std::span<const uint8_t>) {}
void ExpertParallel::end_steps() {}
uint64_t ExpertParallel::follow_steps(Engine&) { return 0; }
void ExpertParallel::send_header(int64_t) {}
int64_t ExpertParallel::receive_header() { return -1; }
bool built_with_mpi() { return false; }
void abort_expert_parallel(int) {}

#endif

}  // namespace sluice::core
