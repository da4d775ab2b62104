// The out-of-core invariant: streaming experts (and, below the resident size, the layers'
// own tensors) through budgeted caches changes nothing in the numbers. Every reference model, at
// budgets from the minimum to unlimited, with both readers, gives logits bit-identical to the
// in-core run with the same prompt batch.
#include <doctest/doctest.h>

#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/error.h"
#include "core/engine.h"
#include "tests/reference_files.h"
#include "tests/test_support.h"

using sluice::core::Engine;
using sluice::core::EngineOptions;

namespace {

struct Tokens {
  std::vector<int32_t> prompt, gen;
};

Tokens manifest_tokens(const std::string& stem) {
  auto j = nlohmann::json::parse(sluice::test::read_text(sluice::test::reference_dir() / (stem + ".json")));
  return {j["prompt_tokens"].get<std::vector<int32_t>>(), j["gen_tokens"].get<std::vector<int32_t>>()};
}

// Teacher-forced logits of every row: the prompt in batches of the session's batch size (one
// batch unless a tight budget lowered it), then each generated token alone.
std::vector<float> teacher_forced_logits(Engine& engine, const Tokens& t) {
  std::vector<float> all;
  const size_t b = static_cast<size_t>(engine.n_batch());
  for (size_t i = 0; i < t.prompt.size(); i += b) {
    const size_t n = std::min(b, t.prompt.size() - i);
    auto rows = engine.forward({t.prompt.data() + i, n}, static_cast<int64_t>(i));
    all.insert(all.end(), rows.begin(), rows.end());
  }
  for (size_t s = 0; s < t.gen.size(); ++s) {
    auto row = engine.forward({&t.gen[s], 1}, static_cast<int64_t>(t.prompt.size() + s));
    all.insert(all.end(), row.begin(), row.end());
  }
  return all;
}

EngineOptions options_for(const std::string& stem) {
  EngineOptions o;
  o.model_path = (sluice::test::reference_dir() / (stem + ".gguf")).string();
  o.session.n_ctx = 64;
  o.session.kv_type = sluice::GgmlType::F32;
  o.threads = 2;
  return o;
}

bool dense_sweep(const std::string& stem) {
  for (const char* s : {"tiny/deepseek2/deepseek2-q4_k_m", "tiny/deepseek2/deepseek2-q2_k", "tiny/deepseek2/deepseek2-f16",
                        "tiny/qwen3moe/qwen3moe-q4_k_m", "tiny/llama-moe/llama-moe-q4_k_m"})
    if (stem == s) return true;
  return false;
}

// In-core logits per prompt batch size: a budget that lowers the batch is compared with an
// in-core run of the same batch (batched products round differently from single-token ones).
class InCoreReference {
 public:
  InCoreReference(std::string stem, Tokens tokens) : stem_(std::move(stem)), tokens_(std::move(tokens)) {}
  const std::vector<float>& at_batch(int64_t batch) {
    auto it = by_batch_.find(batch);
    if (it != by_batch_.end()) return it->second;
    EngineOptions o = options_for(stem_);
    o.in_core = true;
    o.session.n_batch = batch;
    Engine e(o);
    CHECK(e.cache() == nullptr);
    CHECK(e.budget().embeddings_in_file == 0);  // in core, the table is resident
    return by_batch_[batch] = teacher_forced_logits(e, tokens_);
  }

 private:
  std::string stem_;
  Tokens tokens_;
  std::map<int64_t, std::vector<float>> by_batch_;
};

// The budget at which layers stream at the full batch: the minimum's resident part (with the
// recurrent state, 0 but for kimi-k3), two units of the layer cache, the unlimited run's scratch.
uint64_t layers_at_full_batch(const std::string& stem, uint64_t minimum, uint64_t full_batch_scratch) {
  EngineOptions o = options_for(stem);
  o.budget_bytes = minimum;
  Engine e(o);
  REQUIRE(e.layer_cache() != nullptr);
  const auto& b = e.budget();
  return b.resident_weights + 2 * b.layer_arena + b.kv_cache + b.recurrent_state + full_batch_scratch + b.expert_min;
}

}  // namespace

TEST_CASE("streamed experts and layers give logits bit-identical to the in-core run at every budget and with both readers") {
  for (const auto& model : sluice::test::llama_family_reference_models()) {
    const char* stem = model.stem;
    CAPTURE(stem);
    InCoreReference reference(stem, manifest_tokens(stem));
    const int64_t full_batch = options_for(stem).session.n_batch;

    // The minimum budget, from an unlimited engine's own accounting.
    sluice::core::BudgetSplit unlimited;
    uint64_t one_moe_layer = 0;
    {
      Engine e(options_for(stem));
      unlimited = e.budget();
      one_moe_layer = unlimited.routed_expert_bytes / e.cache()->layout().n_layer();
      auto logits = teacher_forced_logits(e, manifest_tokens(stem));
      const auto& ref = reference.at_batch(full_batch);
      REQUIRE(logits.size() == ref.size());
      CHECK(std::memcmp(logits.data(), ref.data(), logits.size() * sizeof(float)) == 0);
      CHECK(e.cache()->stats().total.evictions == 0);
      CHECK(e.layer_cache() == nullptr);
      CHECK(unlimited.embeddings_in_file > 0);
    }
    const uint64_t minimum = unlimited.minimum(), unlimited_total = unlimited.total();
    MESSAGE(std::string(stem), ": minimum budget ", minimum, " bytes (", (minimum + (1 << 20) - 1) >> 20,
            " MiB), resident ", unlimited.resident_weights, " + one MoE layer's experts ", one_moe_layer,
            ", unlimited ", unlimited_total, " bytes");
    CHECK(minimum < unlimited_total);
    // The bar: the minimum is below all resident weights plus one MoE layer's experts.
    CHECK(minimum < unlimited.resident_weights + one_moe_layer);

    const uint64_t layers_full_batch = layers_at_full_batch(stem, minimum, unlimited.scratch);

    // Five budget points and both readers on the files this test first covered; the minimum, the
    // two-slot layer budget and unlimited with io_uring on the others (CI time: each point is a
    // full teacher-forced run).
    std::vector<uint64_t> budgets{minimum, layers_full_batch, unlimited_total};
    if (dense_sweep(stem))
      budgets = {minimum, minimum + (layers_full_batch - minimum) / 2, layers_full_batch,
                 minimum + (unlimited_total - minimum) / 3, unlimited_total};
    for (auto kind : {sluice::io::IoKind::uring, sluice::io::IoKind::pread}) {
      if (!dense_sweep(stem) && kind == sluice::io::IoKind::pread) continue;
      for (uint64_t budget : budgets) {
        CAPTURE(budget);
        CAPTURE(sluice::io::to_string(kind));
        EngineOptions o = options_for(stem);
        o.budget_bytes = budget;
        o.io.kind = kind;
        Engine e(o);
        CHECK(e.budget().total() <= budget);
        // Streamed runs read token embedding rows from the file (every file here has its own
        // output head), so the memcmp below binds those rows to the in-core run's table.
        CHECK(e.budget().embeddings_in_file > 0);
        const int64_t batch = e.session().n_batch();
        CHECK(batch == e.budget().n_batch);
        if (budget == minimum) CHECK(batch < full_batch);
        const bool layers_two_slots =
            budget == layers_full_batch && budget < unlimited.total() - unlimited.expert_arena + unlimited.expert_min;
        if (layers_two_slots) {
          CHECK(batch == full_batch);
          REQUIRE(e.layer_cache() != nullptr);
        }
        auto logits = teacher_forced_logits(e, manifest_tokens(stem));
        if (layers_two_slots) {
          // Two slots: the next layer is read while one computes, so nearly every acquire hits.
          const auto l = e.layer_cache()->stats().total;
          CHECK(l.prefetches > 0);
          CHECK(l.hits > l.misses);
        }
        const auto& ref = reference.at_batch(batch);
        REQUIRE(logits.size() == ref.size());
        CHECK(std::memcmp(logits.data(), ref.data(), logits.size() * sizeof(float)) == 0);
        auto stats = e.cache()->stats();
        if (budget == minimum) {
          CHECK(stats.total.evictions > 0);
          REQUIRE(e.layer_cache() != nullptr);
          CHECK(e.layer_cache()->stats().total.evictions > 0);
          CHECK(e.layer_cache()->stats().total.bytes_read > 0);
        }
        CHECK(stats.total.bytes_read > 0);
        CHECK(stats.arena_bytes <= budget);
      }
    }
  }
}

namespace {

// The smallest budget at which every block stays resident (at batch 1): all resident weights,
// one MoE layer's experts, KV, recurrent state and the scratch at batch 1. The minimum before
// kimi-k3's layers could stream.
uint64_t all_resident_minimum(Engine& unlimited) {
  const auto& b = unlimited.budget();
  const uint64_t scratch =
      unlimited.model().scratch_bytes({.n_ctx = 64, .n_batch = 1, .kv_type = sluice::GgmlType::F32}, 2);
  return b.resident_weights + b.kv_cache + b.recurrent_state + scratch + b.expert_min;
}

}  // namespace

TEST_CASE("kimi-k3 streamed layers and experts give the in-core logits at every budget from the minimum, prefetch depth 0 to 3") {
  for (const auto& model : sluice::test::supported_reference_models()) {
    if (!model.kimi_k3) continue;
    const char* stem = model.stem;
    CAPTURE(stem);
    InCoreReference reference(stem, manifest_tokens(stem));
    const int64_t full_batch = options_for(stem).session.n_batch;
    sluice::core::BudgetSplit unlimited;
    uint64_t resident_minimum = 0;
    {
      Engine e(options_for(stem));
      REQUIRE(e.cache() != nullptr);
      CHECK(e.layer_cache() == nullptr);
      unlimited = e.budget();
      resident_minimum = all_resident_minimum(e);
      CHECK(unlimited.recurrent_state > 0);
      CHECK(e.session().recurrent_state_bytes() == unlimited.recurrent_state);
      CHECK_FALSE(e.session().can_rewind());  // a recurrent state restarts from 0
    }
    const uint64_t minimum = unlimited.minimum(), unlimited_total = unlimited.total();
    MESSAGE(std::string(stem), ": minimum budget ", minimum, " bytes (", (minimum + (1 << 20) - 1) >> 20,
            " MiB), every block resident from ", resident_minimum, " bytes; resident ", unlimited.resident_weights,
            ", one MoE layer's experts ", unlimited.expert_min, ", recurrent state ", unlimited.recurrent_state,
            ", unlimited ", unlimited_total, " bytes");
    // The bar: layers stream, so the minimum falls below resident weights plus one layer.
    CHECK(minimum < resident_minimum);
    CHECK(minimum < unlimited.resident_weights + unlimited.expert_min);

    const uint64_t layers_full_batch = layers_at_full_batch(stem, minimum, unlimited.scratch);

    for (int depth : {0, 1, 2, 3}) {
      for (auto kind : {sluice::io::IoKind::uring, sluice::io::IoKind::pread}) {
        if (kind == sluice::io::IoKind::pread && depth > 0) continue;  // the reader is not the point there
        // Every block resident at the full batch, the predictor's scratch included (and the
        // reader's slot alignment): below it the planner streams layers rather than lower the batch.
        uint64_t resident_full_batch = 0, unlimited_at_depth = 0;
        {
          EngineOptions o = options_for(stem);
          o.session.prefetch_depth = depth;
          o.io.kind = kind;
          Engine e(o);
          const auto& b = e.budget();
          resident_full_batch = b.total() - b.expert_arena + b.expert_min;
          unlimited_at_depth = b.total();
        }
        const std::vector<uint64_t> budgets{minimum,
                                            minimum + (layers_full_batch - minimum) / 2,
                                            layers_full_batch,
                                            resident_full_batch - 1,
                                            resident_full_batch,
                                            resident_full_batch + (unlimited_at_depth - resident_full_batch) / 2,
                                            unlimited_at_depth};
        for (uint64_t budget : budgets) {
          CAPTURE(depth);
          CAPTURE(budget);
          CAPTURE(sluice::io::to_string(kind));
          EngineOptions o = options_for(stem);
          o.budget_bytes = budget;
          o.io.kind = kind;
          o.session.prefetch_depth = depth;
          Engine e(o);
          CHECK(e.budget().total() <= budget);
          const bool layers_stream = e.layer_cache() != nullptr;
          CHECK(layers_stream == (budget < resident_full_batch));
          // The predictor reads later blocks' routers, which are in RAM only when no block streams.
          CHECK(e.session().prefetch_depth() == (layers_stream ? 0 : depth));
          if (budget == minimum) CHECK(e.n_batch() < full_batch);
          if (budget >= layers_full_batch) CHECK(e.n_batch() == full_batch);
          CHECK(e.session().scratch_bytes() ==
                e.model().scratch_bytes({.n_ctx = 64, .n_batch = e.n_batch(), .kv_type = sluice::GgmlType::F32,
                                         .prefetch_depth = e.session().prefetch_depth()},
                                        2));
          auto logits = teacher_forced_logits(e, manifest_tokens(stem));
          const auto& ref = reference.at_batch(e.n_batch());
          REQUIRE(logits.size() == ref.size());
          CHECK(std::memcmp(logits.data(), ref.data(), logits.size() * sizeof(float)) == 0);
          const auto stats = e.cache()->stats();
          CHECK(stats.total.bytes_read > 0);
          if (budget == minimum) {
            CHECK(stats.total.evictions > 0);
            CHECK(e.layer_cache()->stats().total.evictions > 0);
          }
          if (budget == layers_full_batch) {
            // Two slots: the next block is read while one computes.
            const auto l = e.layer_cache()->stats().total;
            CHECK(l.prefetches > 0);
            CHECK(l.hits > l.misses);
          }
          if (!layers_stream && depth > 0) {
            REQUIRE(e.prefetcher() != nullptr);
            CHECK(e.prefetcher()->stats().total.steps > 0);  // predictions were made and scored
          }
        }
      }
    }
    EngineOptions o = options_for(stem);
    o.budget_bytes = minimum - 1;
    CHECK_THROWS_WITH_AS(Engine{o}, doctest::Contains("below the minimum"), sluice::Error);
  }
}

TEST_CASE("a budget below the minimum is refused with the minimum in MiB and its parts in the message") {
  for (const auto& model : sluice::test::llama_family_reference_models()) {
    const char* stem = model.stem;
    const std::string name = stem;
    CAPTURE(name);
    uint64_t minimum = 0;
    {
      Engine e(options_for(stem));
      minimum = e.budget().minimum();
    }
    EngineOptions o = options_for(stem);
    o.budget_bytes = minimum - 1;
    try {
      Engine e(o);
      FAIL("a budget below the minimum was accepted");
    } catch (const sluice::Error& err) {
      CHECK(err.code() == sluice::ErrorCode::budget);
      std::string m = err.what();
      CHECK(m.find("below the minimum " + std::to_string((minimum + (1 << 20) - 1) >> 20) + " MiB") != std::string::npos);
      CHECK(m.find("one streamed layer") != std::string::npos);
      CHECK(m.find("one MoE layer's experts") != std::string::npos);
    }
    o.budget_bytes = minimum / 2;  // far below (the 1-bit files' minimum is under 1 MiB)
    CHECK_THROWS_WITH_AS(Engine{o}, doctest::Contains("below the minimum"), sluice::Error);
  }
}

TEST_CASE("a context whose KV cache outgrows the budget is refused naming the largest context that fits, which opens") {
  for (const char* stem : {"tiny/deepseek2/deepseek2-q4_k_m", "tiny/qwen3moe/qwen3moe-q4_k_m", "kimi-k3/kimi-k3-q4_k_m"}) {
    CAPTURE(stem);
    EngineOptions o = options_for(stem);
    o.session.n_ctx = 1024;
    uint64_t minimum_at_1024 = 0;
    {
      Engine e(o);
      minimum_at_1024 = e.budget().minimum();
    }
    o.budget_bytes = minimum_at_1024;
    o.session.n_ctx = 8192;
    int64_t largest = 0;
    try {
      Engine e(o);
      FAIL("a context the budget cannot hold was accepted");
    } catch (const sluice::Error& err) {
      CHECK(err.code() == sluice::ErrorCode::budget);
      const std::string m = err.what();
      const size_t at = m.find("the largest context that fits is -c ");
      REQUIRE(at != std::string::npos);
      largest = std::stoll(m.substr(at + std::string("the largest context that fits is -c ").size()));
    }
    CHECK(largest >= 1024);
    CHECK(largest < 8192);
    o.session.n_ctx = largest;
    CHECK_NOTHROW(Engine{o});
    o.session.n_ctx = largest + 1;
    CHECK_THROWS_WITH_AS(Engine{o}, doctest::Contains("below the minimum"), sluice::Error);
  }
}

TEST_CASE("a budget that cannot hold the scratch of the requested batch lowers the batch and says so") {
  const std::string stem = "tiny/deepseek2/deepseek2-q4_k_m";
  uint64_t minimum = 0;
  {
    Engine e(options_for(stem));
    minimum = e.budget().minimum();
  }
  EngineOptions o = options_for(stem);
  o.budget_bytes = minimum;
  Engine e(o);
  CHECK(e.session().n_batch() == 1);
  bool said = false;
  for (const auto& n : e.notices()) said = said || n.find("batch lowered from 512 to 1") != std::string::npos;
  CHECK(said);
  CHECK(e.describe_budget().find("streamed layers") != std::string::npos);
}

TEST_CASE("--cache-experts sizes the budget so the arena holds that fraction of the routed experts") {
  EngineOptions o = options_for("tiny/deepseek2/deepseek2-q4_k_m");
  o.cache_experts = 0.5;
  Engine e(o);
  const auto& b = e.budget();
  CHECK(b.budget == b.total());
  double share = static_cast<double>(b.expert_arena) / static_cast<double>(b.routed_expert_bytes);
  CHECK(share > 0.45);
  CHECK(share < 0.75);  // slots are padded to 4 KiB per tensor slice
  CHECK(e.describe_budget().find("expert cache") != std::string::npos);
}
