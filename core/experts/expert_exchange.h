// ExpertExchange: expert parallelism's seam in the MoE layer (`--expert-parallel`, issue #25).
//
// N processes ("ranks") run the same model. Every rank computes the non-routed part (attention,
// norms, router, shared expert) redundantly and identically, so the hidden state and the routing
// are the same on every rank without being sent. Each routed expert belongs to one rank
// (ExpertPartition); a rank reads, caches and computes only its own experts. Per MoE layer:
//
//   route (every rank, identical) -> plan/compute the experts this rank owns, writing their
//   (token, slot) rows -> exchange(): every rank receives the other ranks' rows -> every rank
//   sums the K slots of each token in routing order, exactly as one process does.
//
// The exchange moves per-slot outputs (a gather), never partial sums (a reduce), so the float
// additions happen in one order on every rank and the logits equal one process's bit for bit.
//
// Rows: [n_slots][n_embd] floats, n_slots = n_tokens * n_expert_used, row i is token i / K,
// routing slot i % K, routed to expert ids[i]. On entry the rows whose expert this rank owns are
// filled (the others are garbage); on return every row holds its owner's values. `scratch` is
// caller-owned, at least n_slots * n_embd floats (sized with the session: nothing is allocated
// per token).
//
// Implementations: app/expert_parallel.h (MPI). Layer and expert ids are the model's.
#pragma once

#include <cstdint>
#include <span>

namespace sluice::core {

// Which rank owns which expert. Static: expert e of every layer goes to rank e mod n_ranks, so
// each rank holds 1/N of every layer's experts (and of each layer's working set on average).
struct ExpertPartition {
  int n_ranks = 1;
  int rank = 0;
  int owner(int layer, int32_t expert) const {
    (void)layer;
    return static_cast<int>(expert % n_ranks);
  }
  bool owns(int layer, int32_t expert) const { return owner(layer, expert) == rank; }
  // Experts of one layer (of n_expert) that `r` owns.
  int64_t owned_count(int64_t n_expert, int r) const {
    return n_expert / n_ranks + (r < n_expert % n_ranks ? 1 : 0);
  }
};

class ExpertExchange {
 public:
  virtual ~ExpertExchange() = default;
  virtual const ExpertPartition& partition() const = 0;
  // See the header comment. Collective: every rank calls it once per MoE layer and forward pass,
  // in the same order, with the same ids.
  virtual void exchange(int layer, std::span<const int32_t> ids, int64_t n_embd, std::span<float> rows,
                        std::span<float> scratch) = 0;
};

// An exchange among one rank (tests; `--expert-parallel` without mpirun): nothing to move.
class LocalExchange final : public ExpertExchange {
 public:
  const ExpertPartition& partition() const override { return partition_; }
  void exchange(int, std::span<const int32_t>, int64_t, std::span<float>, std::span<float>) override {}

 private:
  ExpertPartition partition_;
};

// Whether this process computes `expert` (always, without an exchange).
inline bool computes_expert(const ExpertExchange* exchange, int layer, int32_t expert) {
  return exchange == nullptr || exchange->partition().owns(layer, expert);
}

}  // namespace sluice::core
