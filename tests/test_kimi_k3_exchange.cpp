// kimi-k3's side of the expert-parallel seam (core/experts/expert_exchange.h) without MPI: two
// sessions on two threads, each owning half the experts, swap their latent (token, slot) rows
// through an in-process exchange and must give one session's logits bit for bit. This runs in
// every build, sanitizer builds included (they leave MPI out, so test_expert_parallel.cpp's
// mpirun cases do not run there).
#include <doctest/doctest.h>

#include <barrier>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include "core/experts/expert_exchange.h"
#include "core/kimi_k3/kimi_k3_model.h"
#include "core/kimi_k3/kimi_k3_session.h"
#include "kernels/thread_pool.h"
#include "tests/test_support.h"

namespace fs = std::filesystem;
using namespace sluice;

namespace {

// The rows of one exchange, shared by the two ranks' threads.
struct Board {
  std::barrier<> sync{2};
  std::vector<float> rows;
};

// One rank of a two-rank job: publish the rows it owns, wait, take the others'.
class ThreadExchange final : public core::ExpertExchange {
 public:
  ThreadExchange(Board& board, int rank, int64_t width) : board_(board), width_(width) {
    partition_.n_ranks = 2;
    partition_.rank = rank;
  }
  const core::ExpertPartition& partition() const override { return partition_; }
  void set_partition(core::ExpertPartition p) override { partition_ = std::move(p); }
  void finish() override {}
  void begin(int layer, std::span<const int32_t> ids, int64_t n_embd, std::span<float> rows,
             std::span<float> scratch) override {
    ++calls;
    if (n_embd != width_) ++wrong_width;  // K3 exchanges latent rows, not n_embd ones
    const size_t E = static_cast<size_t>(n_embd);
    if (scratch.size() < ids.size() * E) ++short_scratch;
    for (size_t i = 0; i < ids.size(); ++i)
      if (partition_.owns(layer, ids[i])) std::memcpy(board_.rows.data() + i * E, rows.data() + i * E, E * 4);
    board_.sync.arrive_and_wait();
    for (size_t i = 0; i < ids.size(); ++i)
      if (!partition_.owns(layer, ids[i])) std::memcpy(rows.data() + i * E, board_.rows.data() + i * E, E * 4);
    board_.sync.arrive_and_wait();  // nobody writes the next layer's rows before both have read
  }
  int calls = 0, wrong_width = 0, short_scratch = 0;

 private:
  Board& board_;
  int64_t width_;
  core::ExpertPartition partition_;
};

// Prompt as one batch, then three decode steps; every row's logits.
std::vector<float> run(core::KimiK3Session& s) {
  const std::vector<int32_t> prompt{2047, 464, 627, 624, 1379, 11, 7};
  std::vector<float> out;
  auto keep = [&](std::span<const float> l) { out.insert(out.end(), l.begin(), l.end()); };
  keep(s.forward(prompt, 0));
  for (int64_t p = 0; p < 3; ++p) keep(s.forward({&prompt[static_cast<size_t>(p)], 1}, 7 + p));
  return out;
}

}  // namespace

TEST_CASE("two kimi-k3 sessions splitting the experts through an exchange give one session's logits bit for bit") {
  const fs::path gguf = test::reference_dir() / "kimi-k3" / "kimi-k3-q4_k_m.gguf";
  REQUIRE_MESSAGE(fs::exists(gguf), "reference model missing: " << gguf);
  auto model = core::KimiK3Model::load(gguf.string());
  const core::KimiK3Config& c = model->config();
  const core::KimiK3SessionOptions base{.n_ctx = 32, .n_batch = 8, .kv_type = GgmlType::F32};

  kernels::ThreadPool pool(1);
  core::KimiK3InCoreExperts experts(*model);
  core::KimiK3Session one(*model, experts, pool, base);
  const std::vector<float> want = run(one);

  Board board;
  board.rows.resize(static_cast<size_t>(base.n_batch * c.n_expert_used * c.expert_width()));
  std::vector<float> got[2];
  int calls[2] = {}, wrong_width[2] = {}, short_scratch[2] = {};
  uint64_t scratch[2] = {}, planned[2] = {};
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      ThreadExchange x(board, r, c.expert_width());
      core::KimiK3SessionOptions o = base;
      o.exchange = &x;
      kernels::ThreadPool rank_pool(1);
      core::KimiK3InCoreExperts rank_experts(*model);
      core::KimiK3Session s(*model, rank_experts, rank_pool, o);
      scratch[r] = s.scratch_bytes();
      planned[r] = core::KimiK3Session::scratch_bytes_for(*model, o, 1);
      got[r] = run(s);
      calls[r] = x.calls;
      wrong_width[r] = x.wrong_width;
      short_scratch[r] = x.short_scratch;
    });
  for (auto& t : ranks) t.join();

  const int64_t moe_layers = c.n_layer - c.n_layer_dense_lead;
  for (int r = 0; r < 2; ++r) {
    CAPTURE(r);
    CHECK(calls[r] == 4 * moe_layers);  // once per MoE layer and forward
    CHECK(wrong_width[r] == 0);
    CHECK(short_scratch[r] == 0);
    // The exchange scratch is counted where the budget is planned: [n_batch * K][expert_width] floats.
    CHECK(scratch[r] == planned[r]);
    CHECK(scratch[r] == one.scratch_bytes() + static_cast<uint64_t>(base.n_batch * c.n_expert_used * c.expert_width()) * 4);
    REQUIRE(got[r].size() == want.size());
    CHECK(std::memcmp(got[r].data(), want.data(), want.size() * sizeof(float)) == 0);
  }
}
