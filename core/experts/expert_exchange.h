// ExpertExchange: expert parallelism's seam in the MoE layer (`--expert-parallel`, issue #25).
//
// N processes ("ranks") run the same model. Every rank computes the non-routed part (attention,
// norms, router, shared expert) redundantly and identically, so the hidden state and the routing
// are the same on every rank without being sent. Each routed expert belongs to one rank
// (ExpertPartition); a rank reads, caches and computes only its own experts. Per MoE layer:
//
//   route (every rank, identical) -> plan/compute the experts this rank owns, writing their
//   (token, slot) rows -> begin(): start sending this rank's rows to the others -> (the shared
//   expert, which needs no other rank's rows) -> finish(): every rank has received the other
//   ranks' rows -> every rank sums the K slots of each token in routing order, exactly as one
//   process does.
//
// The exchange moves per-slot outputs (a gather), never partial sums (a reduce), so the float
// additions happen in one order on every rank and the logits equal one process's bit for bit.
//
// Rows: [n_slots][n_embd] floats, n_slots = n_tokens * n_expert_used, row i is token i / K,
// routing slot i % K, routed to expert ids[i]. On begin() the rows whose expert this rank owns are
// filled (the others are garbage); after finish() every row holds its owner's values. Between
// the two the caller must not touch `rows`, `ids` or `scratch`. `scratch` is caller-owned, at
// least n_slots * n_embd floats (sized with the session: nothing is allocated per token).
//
// Implementations: app/expert_parallel.h (MPI). Layer and expert ids are the model's (the layer
// is the block index, dense blocks included).
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace sluice::core {

// Which rank owns which expert.
//
// Static (the default, `owners` empty): expert e of every layer goes to rank e mod n_ranks, so
// each rank holds 1/N of every layer's experts (and of each layer's working set on average).
//
// Table (`owners` filled, e.g. by balanced_partition in core/experts/expert_partition.h):
// owners[layer * n_expert + e] is the rank of expert e in block `layer`, for every block of the
// model (dense blocks too, so any layer id is in range). Sized once at load; owner() is a lookup.
struct ExpertPartition {
  int n_ranks = 1;
  int rank = 0;
  int64_t n_expert = 0;         // columns of `owners`
  std::vector<int32_t> owners;  // [n_block][n_expert]; empty: static

  int owner(int layer, int32_t expert) const {
    if (owners.empty()) return static_cast<int>(expert % n_ranks);
    return owners[static_cast<size_t>(layer) * static_cast<size_t>(n_expert) + static_cast<size_t>(expert)];
  }
  bool owns(int layer, int32_t expert) const { return owner(layer, expert) == rank; }
  // Experts of block `layer` (of n_expert) that `r` owns.
  int64_t owned_count(int layer, int64_t n_expert_of_layer, int r) const {
    if (owners.empty()) return n_expert_of_layer / n_ranks + (r < n_expert_of_layer % n_ranks ? 1 : 0);
    int64_t k = 0;
    for (int64_t e = 0; e < n_expert_of_layer; ++e) k += owner(layer, static_cast<int32_t>(e)) == r;
    return k;
  }
};

// What one rank's MoE layers computed: one product per (forward, layer, expert) it ran, and the
// (token, slot) rows of those products. Ranks that split the experts report disjoint shares that
// add up to one process's work (`sluice run --expert-parallel` prints them, one line per rank).
struct ComputedExperts {
  uint64_t products = 0;
  uint64_t rows = 0;
};

class ExpertExchange {
 public:
  virtual ~ExpertExchange() = default;
  virtual const ExpertPartition& partition() const = 0;
  // Replaces the partition (at load, before any exchange; same n_ranks and rank).
  virtual void set_partition(ExpertPartition partition) = 0;
  // See the header comment. Collective: every rank calls begin() and then finish() once per MoE
  // layer and forward pass, in the same order, with the same ids; one exchange at a time.
  virtual void begin(int layer, std::span<const int32_t> ids, int64_t n_embd, std::span<float> rows,
                     std::span<float> scratch) = 0;
  virtual void finish() = 0;
  // The session calls this once for each routed expert it computes, with the expert's rows
  // (from the thread that runs forward(): one thread at a time, like every exchange call).
  void note_computed(int64_t rows) {
    computed_.products += 1;
    computed_.rows += static_cast<uint64_t>(rows);
  }
  ComputedExperts computed() const { return computed_; }
  // begin() then finish(), with nothing between.
  void exchange(int layer, std::span<const int32_t> ids, int64_t n_embd, std::span<float> rows,
                std::span<float> scratch) {
    begin(layer, ids, n_embd, rows, scratch);
    finish();
  }

 private:
  ComputedExperts computed_;
};

// An exchange among one rank (tests; `--expert-parallel` without mpirun): nothing to move.
class LocalExchange final : public ExpertExchange {
 public:
  const ExpertPartition& partition() const override { return partition_; }
  void set_partition(ExpertPartition p) override { partition_ = std::move(p); }
  void begin(int, std::span<const int32_t>, int64_t, std::span<float>, std::span<float>) override {}
  void finish() override {}

 private:
  ExpertPartition partition_;
};

// Whether this process computes `expert` (always, without an exchange).
inline bool computes_expert(const ExpertExchange* exchange, int layer, int32_t expert) {
  return exchange == nullptr || exchange->partition().owns(layer, expert);
}

}  // namespace sluice::core
