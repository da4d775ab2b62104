// ExpertParallel: one rank of an MPI job that runs a model with expert parallelism
// (`mpirun -np N sluice run|bench|serve ... --expert-parallel`, issue #25; docs/scale-out.md).
//
// Every rank opens the same model path, computes the non-routed part redundantly (so hidden
// state, routing and sampling agree on every rank without messages) and reads, caches and
// computes only its share of the routed experts (core::ExpertPartition: expert e -> rank
// e mod N, or balanced by a profile: core/experts/expert_partition.h). Per MoE layer the ranks
// allgather their per-(token, slot) expert outputs (MPI_Iallgatherv, in place in a buffer the
// session sizes up front, started after the routed experts and waited for after the shared
// expert); each rank then sums the slots in routing order, as one process does, so logits are
// bit-identical for any N.
//
// The CLI owns one ExpertParallel for the life of the command (MPI_Init_thread at construction,
// MPI_Finalize at destruction). Built without MPI (no libopenmpi-dev at configure time, or a
// sanitizer build), the constructor throws Error(unsupported) with one line saying so.
//
// Threads: MPI is initialised with MPI_THREAD_SERIALIZED; every MPI call of a rank comes from one
// thread at a time (the command's thread, or serve's scheduler thread).
//
// Errors: a rank that fails cannot leave the others waiting in a collective. After the CLI has
// printed an error, abort_expert_parallel() ends the whole job (MPI_Abort) when more than one rank
// runs.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/experts/expert_exchange.h"

namespace sluice::core {
class Engine;
}

namespace sluice::core {

// What one rank's exchange did so far.
struct ExchangeStats {
  uint64_t calls = 0;           // MoE layer exchanges
  uint64_t rows_sent = 0;       // this rank's (token, slot) rows
  uint64_t bytes_received = 0;  // the other ranks' rows
  double seconds = 0;           // in begin() and finish() (includes waiting for slower ranks)
  double wait_seconds = 0;      // of which in finish()'s MPI_Wait (what the overlap did not hide)
  ComputedExperts computed;     // what this rank's MoE layers computed (its share of the experts)
};

class ExpertParallel {
 public:
  ExpertParallel();  // Error(unsupported) without MPI
  ~ExpertParallel();
  ExpertParallel(const ExpertParallel&) = delete;
  ExpertParallel& operator=(const ExpertParallel&) = delete;

  int rank() const { return partition_.rank; }
  int n_ranks() const { return partition_.n_ranks; }
  bool leader() const { return rank() == 0; }
  ExpertExchange& exchange();
  ExchangeStats stats() const;

  // Collectives for the commands (call from every rank, in the same order).
  // Rank 0's bytes to every rank; `bytes` has the same size on every rank.
  void broadcast(std::span<std::byte> bytes);
  template <class T>
  void broadcast_value(T& v) {
    broadcast(std::as_writable_bytes(std::span<T>(&v, 1)));
  }
  // Each rank's `values` (the same count on every rank), rank-major, on rank 0 (empty elsewhere).
  std::vector<double> gather(std::span<const double> values);
  void barrier();

  // serve: rank 0 runs the HTTP server and the scheduler; the other ranks replay each batch step.
  // lead_step() (rank 0, before each Engine::forward_batch) sends the step's arguments;
  // end_steps() (rank 0, once the scheduler has stopped) releases the followers. follow_steps()
  // (ranks > 0) runs forward_batch on each step received and returns after end_steps(). An idle
  // follower polls with a growing sleep (up to 5 ms) instead of spinning in MPI.
  void lead_step(std::span<const int32_t> tokens, std::span<const int32_t> seqs, std::span<const int64_t> positions,
                 std::span<const uint8_t> want_logits);
  void end_steps();
  uint64_t follow_steps(Engine& engine);  // the steps followed

 private:
  void send_header(int64_t n);  // n < 0: stop
  int64_t receive_header();
  class Exchange;
  core::ExpertPartition partition_;
  std::unique_ptr<Exchange> exchange_;
};

// Whether this binary was built with MPI.
bool built_with_mpi();
// MPI_Abort(code) when a job of more than one rank is running; otherwise nothing.
void abort_expert_parallel(int code);

}  // namespace sluice::core
