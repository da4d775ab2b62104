// Prefetch: speculative reads are capped and never hold demand back, the prediction statistics
// count what they claim, and logits do not depend on prefetch depth or on the order in which
// experts land.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cache/prefetcher.h"
#include "cache/shard_cache.h"
#include "core/engine.h"
#include "core/llama/expert_predictor.h"
#include "core/experts/streamed_experts.h"
#include "core/llama/in_core_experts.h"
#include "tests/cache_test_util.h"
#include "tests/reference_files.h"

using namespace sluice::cache;
using sluice::test::CacheFixture;
using sluice::test::TestReader;

namespace {

ShardCacheOptions options(uint32_t max_requests, uint64_t max_bytes = 0) {
  ShardCacheOptions o;
  o.budget_bytes = 1 << 20;
  o.max_speculative_in_flight = max_requests;
  o.max_speculative_bytes_in_flight = max_bytes;
  return o;
}

constexpr uint64_t kShard0 = 1000 + 1000 + 500;   // CacheFixture layer 0: gate + up + down slices
constexpr uint64_t kShard1 = 5000 + 5000 + 100;  // layer 1

std::vector<int32_t> tokens_of(const std::string& stem, const char* field) {
  auto j = nlohmann::json::parse(sluice::test::read_text(sluice::test::reference_dir() / (stem + ".json")));
  return j[field].get<std::vector<int32_t>>();
}

// Teacher-forced logits: the prompt as one batch, then each generated token alone.
// The prompt in batches of the session's batch size (one batch unless a tight budget lowered
// it), then each generated token alone.
std::vector<float> logits_of(sluice::core::Engine& engine, const std::string& stem) {
  const auto prompt = tokens_of(stem, "prompt_tokens"), gen = tokens_of(stem, "gen_tokens");
  std::vector<float> all;
  const size_t b = static_cast<size_t>(engine.n_batch());
  for (size_t i = 0; i < prompt.size(); i += b) {
    auto rows = engine.forward({prompt.data() + i, std::min(b, prompt.size() - i)}, static_cast<int64_t>(i));
    all.insert(all.end(), rows.begin(), rows.end());
  }
  for (size_t s = 0; s < gen.size(); ++s) {
    auto row = engine.forward({&gen[s], 1}, static_cast<int64_t>(prompt.size() + s));
    all.insert(all.end(), row.begin(), row.end());
  }
  return all;
}

sluice::core::EngineOptions engine_options(const std::string& stem) {
  sluice::core::EngineOptions o;
  o.model_path = (sluice::test::reference_dir() / (stem + ".gguf")).string();
  o.session.n_ctx = 64;
  o.session.kv_type = sluice::GgmlType::F32;
  o.threads = 2;
  return o;
}

}  // namespace

TEST_CASE("speculative reads in flight never exceed the request cap and demand reads are not held back") {
  CacheFixture fx(2, 8, false);
  TestReader reader(fx.path.string());  // completions wait until someone reaps
  ShardCache cache(fx.layout, reader, options(2));
  CHECK(cache.prefetch({0, 0}));
  CHECK(cache.prefetch({0, 1}));
  CHECK_FALSE(cache.prefetch({0, 2}));  // two in flight: the cap
  CHECK(cache.stats().speculative_in_flight == 2);
  // Demanding a shard still being prefetched makes it a demand read: the cap frees up.
  auto p0 = cache.acquire({0, 0});
  CHECK(cache.stats().speculative_in_flight == 1);
  CHECK(cache.prefetch({0, 2}));
  CHECK_FALSE(cache.prefetch({0, 3}));
  // A demand read goes out at once, beyond the cap.
  const uint64_t before = reader.submitted;
  auto pin = cache.acquire({1, 5});
  CHECK(reader.submitted == before + 3);  // its three extents
  cache.wait(pin);
  CHECK(fx.pin_matches(pin));
  cache.wait(p0);
  CHECK(fx.pin_matches(p0));
  const CacheStats st = cache.stats();
  CHECK(st.layers[0].prefetch_hits == 1);
  CHECK(st.layers[0].prefetch_hits_landed == 0);  // it was demanded while still reading
  CHECK(st.layers[0].hits == 1);
  CHECK(st.speculative_in_flight == 0);  // waiting reaped the other prefetches too
  CHECK(cache.prefetch({0, 3}));
}

TEST_CASE("speculative bytes in flight stay within the byte cap, and one read may trickle under a tiny cap") {
  CacheFixture fx(2, 8, false);
  TestReader reader(fx.path.string());
  {
    ShardCache cache(fx.layout, reader, options(8, kShard0 * 3 / 2));
    CHECK(cache.prefetch({0, 0}));
    CHECK_FALSE(cache.prefetch({0, 1}));  // 2 shards > 1.5 shards
    CHECK(cache.stats().speculative_bytes_in_flight == kShard0);
  }
  {
    ShardCache cache(fx.layout, reader, options(8, 100));  // below one shard
    CHECK(cache.prefetch({0, 0}));
    CHECK_FALSE(cache.prefetch({0, 1}));
    auto pin = cache.acquire({0, 0});
    cache.wait(pin);
    CHECK(cache.stats().layers[0].prefetch_hits_landed == 0);  // demanded while still reading
    CHECK(cache.prefetch({0, 1}));
  }
}

TEST_CASE("a prefetched shard evicted before any use is counted as unused, one used after landing as hidden") {
  CacheFixture fx(1, 8, false);
  TestReader reader(fx.path.string());
  ShardCacheOptions o = options(4);
  o.budget_bytes = 3 * 3 * 4096;  // three slots of 12 KiB
  ShardCache cache(fx.layout, reader, o);
  CHECK(cache.prefetch({0, 7}));
  CHECK(cache.prefetch({0, 6}));
  auto a = cache.acquire({0, 0});
  cache.wait(a);  // reaps the prefetches too
  auto b = cache.acquire({0, 6});  // landed before demand: a hidden miss
  a.release();
  auto c = cache.acquire({0, 1});  // evicts 7 (least recently used, never demanded)
  cache.wait(c);
  const CacheCounters l = cache.stats().layers[0];  // a copy: stats() returns a temporary
  CHECK(l.prefetch_hits == 1);
  CHECK(l.prefetch_hits_landed == 1);
  CHECK(l.prefetch_unused_evicted == 1);
  CHECK_FALSE(cache.is_resident({0, 7}));
  CHECK(cache.stats().io_busy_ns > 0);
}

TEST_CASE("a read-ahead is not capped, and never displaces a shard that was read ahead and not used yet") {
  CacheFixture fx(1, 8, false);
  TestReader reader(fx.path.string());  // completions wait until someone reaps
  ShardCacheOptions o = options(1);     // one speculative read in flight
  o.budget_bytes = 3 * 3 * 4096;        // three slots of 12 KiB
  ShardCache cache(fx.layout, reader, o);
  { auto a = cache.acquire({0, 0}); cache.wait(a); }  // demanded: evictable
  CHECK(cache.read_ahead({0, 1}));
  CHECK(cache.read_ahead({0, 2}));      // past the request cap
  CHECK_FALSE(cache.prefetch({0, 5}));  // a prefetch is still capped
  CHECK(cache.stats().speculative_in_flight == 2);
  CHECK_FALSE(cache.read_ahead({0, 1}));  // present
  { auto b = cache.acquire({0, 1}); cache.wait(b); }  // a prefetch hit; the wait reaps 2 too
  // Slots: 0 and 1 used, 2 read ahead and unused.
  CHECK(cache.read_ahead({0, 3}));  // takes 0's slot (least recently used)
  CHECK(cache.read_ahead({0, 4}));  // takes 1's
  CHECK_FALSE(cache.is_resident({0, 0}));
  CHECK_FALSE(cache.is_resident({0, 1}));
  CHECK(cache.is_resident({0, 2}));
  { auto c = cache.acquire({0, 3}); cache.wait(c); }  // reaps 4
  // Slots: 2 and 4 unused, 3 used: only 3 may make room for another read-ahead.
  CHECK(cache.read_ahead({0, 5}));
  CHECK_FALSE(cache.is_resident({0, 3}));
  { auto c = cache.acquire({0, 5}); cache.wait(c); }
  CHECK(cache.read_ahead({0, 6}));  // 5 is used now: it goes
  CHECK(cache.is_resident({0, 2}));
  CHECK(cache.is_resident({0, 4}));
  CHECK_FALSE(cache.read_ahead({0, 7}));  // 2, 4 and 6 unused: nothing to displace
  // Demand is not restricted: it evicts an unused read-ahead, which counts as unused.
  { auto d = cache.acquire({0, 7}); cache.wait(d); }
  const CacheCounters l = cache.stats().layers[0];  // a copy: stats() returns a temporary
  CHECK(l.prefetches == 6);
  CHECK(l.prefetch_hits == 3);
  CHECK(l.prefetch_unused_evicted == 1);
}

TEST_CASE("read-aheads wait for demand reads like predictions and are scored apart from them") {
  CacheFixture fx;  // 2 layers x 4 experts
  TestReader reader(fx.path.string());
  ShardCache cache(fx.layout, reader, options(1));
  Prefetcher p(cache);
  auto demand = cache.acquire({0, 0});
  CHECK(p.read_ahead(1, std::vector<int32_t>{2, 0, 3}) == 0);
  CHECK(p.queued() == 3);
  cache.wait(demand);
  CHECK(p.pump() == 3);  // all three, past the request cap of 1
  CHECK(cache.stats().layers[1].prefetches == 3);
  p.observe(1, std::vector<int32_t>{0, 1, 3});
  const PredictionCounters c = p.stats().layers[1];  // a copy: stats() returns a temporary
  CHECK(c.ahead_issued == 3);
  CHECK(c.ahead_issued_bytes == 3 * kShard1);
  CHECK(c.ahead_wasted == 1);  // 2 was not routed
  CHECK(c.ahead_wasted_bytes == kShard1);
  // Not a prediction: recall, precision and their waste are untouched.
  CHECK(c.steps == 0);
  CHECK(c.predicted == 0);
  CHECK(c.issued == 0);
  CHECK(c.wasted == 0);
}

TEST_CASE("prediction statistics count recall, precision, waste and the previous token's signal") {
  CacheFixture fx;  // 2 layers x 4 experts
  TestReader reader(fx.path.string());
  ShardCache cache(fx.layout, reader, options(8));
  Prefetcher p(cache);
  {
    auto pin = cache.acquire({1, 3});  // resident: predicted but not read
    cache.wait(pin);
  }
  CHECK(p.predict(1, std::vector<int32_t>{0, 1}) == 2);
  CHECK(p.predict(1, std::vector<int32_t>{1, 3}) == 0);  // union with the first; 1 issued, 3 resident
  p.observe(1, std::vector<int32_t>{1, 2, 3});
  PredictionStats s = p.stats();
  CHECK(s.layers[1].steps == 1);
  CHECK(s.layers[1].predicted == 3);  // 0, 1, 3
  CHECK(s.layers[1].actual == 3);     // 1, 2, 3
  CHECK(s.layers[1].correct == 2);    // 1, 3
  CHECK(s.layers[1].issued == 2);
  CHECK(s.layers[1].issued_bytes == 2 * kShard1);
  CHECK(s.layers[1].wasted == 1);  // 0 was read and not routed
  CHECK(s.layers[1].wasted_bytes == kShard1);
  CHECK(s.layers[1].recall() == doctest::Approx(2.0 / 3));
  CHECK(s.layers[1].precision() == doctest::Approx(2.0 / 3));
  CHECK(s.layers[1].previous_steps == 0);
  CHECK(s.layers[0].steps == 0);
  // A step without a prediction counts only the cross-token signal: 2 of {2, 0} were routed last time.
  p.observe(1, std::vector<int32_t>{2, 0});
  s = p.stats();
  CHECK(s.layers[1].steps == 1);
  CHECK(s.layers[1].previous_steps == 1);
  CHECK(s.layers[1].previous_actual == 2);
  CHECK(s.layers[1].previous_correct == 1);
  CHECK(s.total.wasted_bytes == kShard1);
  CHECK_THROWS_AS(p.predict(2, std::vector<int32_t>{0}), sluice::Error);
  CHECK_THROWS_AS(p.predict(0, std::vector<int32_t>{4}), sluice::Error);
}

TEST_CASE("predictions wait while a demand read is in flight and start once it has landed") {
  CacheFixture fx;
  TestReader reader(fx.path.string());  // completions wait until someone reaps
  ShardCache cache(fx.layout, reader, options(8));
  Prefetcher p(cache);
  auto demand = cache.acquire({0, 0});
  CHECK(cache.demand_reads_in_flight() == 1);
  CHECK(p.predict(1, std::vector<int32_t>{2, 3}) == 0);
  CHECK(p.queued() == 2);
  CHECK(cache.stats().total.prefetches == 0);
  cache.wait(demand);
  CHECK(cache.demand_reads_in_flight() == 0);
  CHECK(p.pump() == 2);
  CHECK(p.queued() == 0);
  CHECK(cache.stats().layers[1].prefetches == 2);
  // Queued predictions of a layer that has routed are dropped, not read.
  auto demand2 = cache.acquire({0, 1});
  CHECK(p.predict(0, std::vector<int32_t>{2}) == 0);
  p.observe(0, std::vector<int32_t>{3});
  cache.wait(demand2);
  CHECK(p.pump() == 0);
  CHECK(p.queued() == 0);
  CHECK(p.stats().layers[0].issued == 0);
}

TEST_CASE("acquire_any hands out resident experts first, then the others in the order their reads land") {
  const std::string path = (sluice::test::reference_dir() / "tiny/deepseek2/deepseek2-q4_k_m.gguf").string();
  sluice::core::LoadOptions lo;
  lo.load_routed_experts = false;
  const sluice::core::Model model = sluice::core::Model::load(path, lo);
  const sluice::core::Model in_core = sluice::core::Model::load(path);
  sluice::core::InCoreExpertSource reference(in_core);
  sluice::core::StreamedLayout layout = build_shard_layout(model.gguf(), sluice::core::ExpertGeometry::of(model.config()));
  const int block = layout.block_of_moe_layer.at(0);
  TestReader reader(path);
  reader.lifo = true;  // completions come back newest first
  ShardCacheOptions o;
  o.budget_bytes = 64ull << 20;
  ShardCache cache(layout.layout, reader, o);
  sluice::core::CachedExpertSource source(model.gguf(), sluice::core::ExpertGeometry::of(model.config()), layout);
  source.attach(cache);
  { auto warm = cache.acquire({0, 2}); cache.wait(warm); }  // expert 2 is resident
  std::vector<int32_t> remaining{0, 1, 2, 3};
  source.plan(block, remaining);  // reads 0, 1, 3 go out in that order
  std::vector<int32_t> order;
  while (!remaining.empty()) {
    sluice::core::ExpertPin pin(source, block, remaining);
    order.push_back(pin.expert());
    const auto want = reference.acquire(block, pin.expert());
    CHECK(std::memcmp(pin.weights().down.data, want.down.data, static_cast<size_t>(want.down.n_rows * want.down.row_stride)) == 0);
    remaining.erase(std::find(remaining.begin(), remaining.end(), pin.expert()));
  }
  CHECK(order == std::vector<int32_t>{2, 3, 1, 0});
}

TEST_CASE("logits are bit-identical with prefetch depth 0 to 3 at small budgets with both readers") {
  // Every llama-family reference file (kimi-k3 runs without prefetch: core/engine.h).
  for (const auto& model : sluice::test::llama_family_reference_models()) {
    const char* stem = model.stem;
    CAPTURE(stem);
    std::map<int64_t, std::vector<float>> reference;  // in core, by prompt batch
    auto reference_at = [&](int64_t batch) -> const std::vector<float>& {
      auto it = reference.find(batch);
      if (it != reference.end()) return it->second;
      auto o = engine_options(stem);
      o.in_core = true;
      o.session.n_batch = batch;
      sluice::core::Engine e(o);
      return reference[batch] = logits_of(e, stem);
    };
    // Every depth, both readers and three budgets on two files; on the others (CI time) the
    // default depth 2 where experts stream with every layer resident (depth 0 is the engine's
    // invariant, tests/test_engine.cpp).
    const bool dense = std::string(stem) == "tiny/deepseek2/deepseek2-q4_k_m" ||
                       std::string(stem) == "tiny/qwen3moe/qwen3moe-q4_k_m";
    for (int depth : {0, 1, 2, 3}) {
      if (!dense && depth != 2) continue;
      // The predictor's scratch counts against the budget. experts_minimum: every layer resident
      // at the full batch, the expert cache at its minimum; below it layers stream and the
      // predictor (which reads later blocks' routers) is off.
      uint64_t minimum = 0, experts_minimum = 0, unlimited = 0;
      {
        auto o = engine_options(stem);
        o.session.prefetch_depth = depth;
        sluice::core::Engine e(o);
        minimum = e.budget().minimum();
        unlimited = e.budget().total();
        experts_minimum = unlimited - e.budget().expert_arena + e.budget().expert_min;
      }
      for (auto kind : {sluice::io::IoKind::uring, sluice::io::IoKind::pread}) {
        if (!dense && kind == sluice::io::IoKind::pread) continue;
        for (uint64_t budget : {minimum, experts_minimum, experts_minimum + (unlimited - experts_minimum) / 4}) {
          if (!dense && budget != experts_minimum + (unlimited - experts_minimum) / 4) continue;
          CAPTURE(sluice::io::to_string(kind));
          CAPTURE(budget);
          CAPTURE(depth);
          auto o = engine_options(stem);
          o.budget_bytes = budget;
          o.io.kind = kind;
          o.session.prefetch_depth = depth;
          sluice::core::Engine e(o);
          const bool layers_stream = e.layer_cache() != nullptr;
          CHECK(e.session().prefetch_depth() == (layers_stream ? 0 : depth));
          CHECK(e.budget().total() <= budget);
          auto logits = logits_of(e, stem);
          const auto& ref = reference_at(e.n_batch());
          REQUIRE(logits.size() == ref.size());
          CHECK(std::memcmp(logits.data(), ref.data(), logits.size() * sizeof(float)) == 0);
          const PredictionStats p = e.prefetcher()->stats();
          if (depth == 0 || layers_stream) {
            CHECK(p.total.steps == 0);
            CHECK(e.cache()->stats().total.prefetches == 0);
          } else {
            CHECK(p.total.steps > 0);
            CHECK(p.total.predicted > 0);
            CHECK(p.total.recall() > 0);  // the next layer's router on this layer's state beats nothing
            // The first MoE layer is predicted too, from the token embeddings before block 0.
            REQUIRE(!p.layers.empty());
            CHECK(p.layers.front().steps > 0);
            CHECK(p.layers.front().predicted > 0);
            if (budget > experts_minimum) CHECK(e.cache()->stats().total.prefetches > 0);
          }
        }
      }
    }
  }
}

TEST_CASE("a prompt batch reads each next MoE layer's likeliest experts ahead where layers stream, and its logits do not change") {
  // The llama family's predictor and kimi-k3's share the read-ahead (core/experts/read_ahead.h).
  for (const std::string stem : {"tiny/deepseek2/deepseek2-q4_k_m", "kimi-k3/kimi-k3-q4_k_m"}) {
    CAPTURE(stem);
    const auto prompt = tokens_of(stem, "prompt_tokens");
    REQUIRE(static_cast<int64_t>(prompt.size()) >= sluice::core::ExpertPredictor::kMinAheadRows);
    auto run = [&](int depth, uint64_t budget) {
      auto o = engine_options(stem);
      o.session.prefetch_depth = depth;
      o.budget_bytes = budget;
      sluice::core::Engine e(o);
      REQUIRE(e.n_batch() >= static_cast<int64_t>(prompt.size()));
      auto rows = e.forward(prompt, 0);
      struct Out {
        std::vector<float> logits;
        PredictionCounters ahead;
        CacheCounters cache;
      };
      return Out{{rows.begin(), rows.end()}, e.prefetcher()->stats().total, e.cache()->stats().total};
    };
    uint64_t budget = 0, unlimited = 0;
    {
      auto o = engine_options(stem);
      o.session.prefetch_depth = 2;
      sluice::core::Engine e(o);
      // A quarter of the experts: the prompt routes to more than that in every layer.
      unlimited = e.budget().total();
      budget = unlimited - e.budget().expert_arena + e.budget().expert_arena / 4;
    }
    // Where every expert fits, no layer streams and nothing is read ahead.
    CHECK(run(2, unlimited).ahead.ahead_issued == 0);
    const auto off = run(0, budget), on = run(2, budget);
    REQUIRE(on.logits.size() == off.logits.size());
    CHECK(std::memcmp(on.logits.data(), off.logits.data(), on.logits.size() * sizeof(float)) == 0);
    CHECK(off.cache.prefetches == 0);
    CAPTURE(on.ahead.ahead_issued);
    CAPTURE(on.ahead.ahead_wasted);
    CAPTURE(on.cache.prefetch_hits);
    CHECK(on.ahead.ahead_issued > 0);
    CHECK(on.ahead.ahead_wasted < on.ahead.ahead_issued);
    CHECK(on.cache.prefetch_hits > 0);                  // the next layer found them
    CHECK(on.cache.misses < off.cache.misses);          // and read that many fewer on demand
    CHECK(on.ahead.steps == 0);                         // no per-token prediction for a batch
  }
}

TEST_CASE("sluice bench --json reports the prefetch figures, and a negative depth is refused") {
  const std::string model = (sluice::test::reference_dir() / "tiny/deepseek2/deepseek2-q4_k_m.gguf").string();
  auto r = sluice::test::run_sluice("bench -m '" + model +
                                    "' --cache-experts 25% -p 8 -n 12 -b 8 --probe-seconds 0.05 --prefetch-depth 2 --json");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  auto j = nlohmann::json::parse(r.out);
  for (const char* field : {"prediction_recall", "prediction_precision", "speculative_waste_bytes_per_token",
                            "io_hidden_share", "previous_token_recall", "layers"}) {
    CHECK_MESSAGE(j.contains(field), field);
  }
  CHECK(j["prefetch_depth"] == 2);
  CHECK(j["prediction_recall"].get<double>() > 0);
  CHECK(j["prediction_recall"].get<double>() <= 1);
  CHECK(!j["layers"].empty());
  auto bad = sluice::test::run_sluice("bench -m '" + model + "' --prefetch-depth -1 -n 12");
  CHECK(bad.exit_code == 1);
  CHECK(bad.err.find("--prefetch-depth -1") != std::string::npos);
}

TEST_CASE("scripts/bench_ab.py alternates two flag sets of sluice bench and reports B's median over A's") {
  REQUIRE_MESSAGE(sluice::test::run_command("command -v python3").exit_code == 0,
                  "python3 is missing (scripts/setup installs it)");
  const std::string model = (sluice::test::reference_dir() / "tiny/deepseek2/deepseek2-q4_k_m.gguf").string();
  const std::string script = (sluice::test::source_dir() / "scripts/bench_ab.py").string();
  const std::string base = "python3 '" + script + "' --binary '" + sluice::test::sluice_binary() + "' -m '" + model +
                           "' --common '--cache-experts 25% -p 8 -n 12 -b 8 --probe-seconds 0.05' --pairs 2";
  auto r = sluice::test::run_command(base + " --a '--prefetch-depth 0' --b '--prefetch-depth 2'");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const std::string last = r.out.substr(r.out.rfind('{'));
  auto j = nlohmann::json::parse(last);
  CHECK(j["metric"] == "decode_tok_s");
  REQUIRE(j["a_values"].size() == 2);
  REQUIRE(j["b_values"].size() == 2);
  CHECK(j["b_median"].get<double>() > 0);
  CHECK(j["b_over_a"].get<double>() == doctest::Approx(j["b_median"].get<double>() / j["a_median"].get<double>()).epsilon(0.01));
  // Runs alternate A, B, A, B; the prefetching side shows its predictions.
  CHECK(r.out.find("pair 1 A") < r.out.find("pair 1 B"));
  CHECK(r.out.find("pair 1 B") < r.out.find("pair 2 A"));
  auto warm = sluice::test::run_command(base + " --a '' --b '--policy lfu' --metric first8_over_steady");
  REQUIRE_MESSAGE(warm.exit_code == 0, warm.err);
  auto w = nlohmann::json::parse(warm.out.substr(warm.out.rfind('{')));
  CHECK(w["metric"] == "first8_over_steady");
  CHECK(w["a_median"].get<double>() > 0);
  auto bad = sluice::test::run_command(base + " --b '--prefetch-depth -1'");
  CHECK(bad.exit_code != 0);
  CHECK(bad.err.find("--prefetch-depth -1") != std::string::npos);
}
