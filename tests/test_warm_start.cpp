// Routing traces recorded from real runs (--trace-out), profiles from them (--profile-out), and
// warm start (--warm): what is recorded is what the router chose, the preload loads exactly the
// profile's top shards that fit, and a warm run computes the same numbers as a cold one.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "cache/trace.h"
#include "cache/warm_start.h"
#include "common/error.h"
#include "core/engine.h"
#include "app/trace_recorder.h"
#include "tests/test_support.h"

using namespace sluice;
using sluice::test::run_sluice;

namespace {

std::string model_path() { return (test::reference_dir() / "tiny/deepseek2/deepseek2-q4_k_m.gguf").string(); }

core::EngineOptions small_cache_options() {
  core::EngineOptions o;
  o.model_path = model_path();
  o.session.n_ctx = 64;
  o.session.kv_type = GgmlType::F32;
  o.threads = 2;
  o.cache_experts = 0.4;
  return o;
}

// Keeps every routing decision and passes it on (the session has one observer).
struct Tee final : core::RoutingObserver {
  explicit Tee(core::RoutingObserver& next) : next(next) {}
  void on_routing(const core::RoutingEvent& e) override {
    events.push_back({e.layer, e.pos, std::vector<int32_t>(e.experts.begin(), e.experts.end())});
    next.on_routing(e);
  }
  struct Event {
    int layer;
    int64_t pos;
    std::vector<int32_t> experts;
  };
  core::RoutingObserver& next;
  std::vector<Event> events;
};

const std::vector<int32_t> kPrompt = {1, 15, 300, 42, 7, 99, 1000, 3};

// Prompt as one batch, then `n_gen` greedy tokens; returns every logits row.
std::vector<float> generate(core::Engine& engine, int n_gen) {
  std::vector<float> all;
  auto rows = engine.forward(kPrompt, 0);
  all.insert(all.end(), rows.begin(), rows.end());
  const auto n_vocab = static_cast<size_t>(engine.n_vocab());
  for (int s = 0; s < n_gen; ++s) {
    auto last = std::span<const float>(all).last(n_vocab);
    int32_t tok = static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin());
    auto row = engine.forward({&tok, 1}, static_cast<int64_t>(kPrompt.size()) + s);
    all.insert(all.end(), row.begin(), row.end());
  }
  return all;
}

std::string write_temp(const std::string& name, const std::string& text) {
  auto path = test::temp_dir("warm") / name;
  std::ofstream(path, std::ios::binary) << text;
  return path.string();
}

}  // namespace

TEST_CASE("a recorded trace parses with the trace reader and holds exactly the routing the session produced") {
  core::Engine engine(small_cache_options());
  const core::ExpertGeometry cfg = engine.model().expert_geometry();
  core::TraceRecorder recorder(model_path());
  Tee tee(recorder);
  engine.session().set_routing_observer(&tee);
  for (int seq = 0; seq < 2; ++seq) {
    recorder.begin_sequence(cfg, engine.session().n_ctx());
    generate(engine, 6);
  }
  const std::string text = cache::format_trace(recorder.trace());
  cache::Trace t = cache::parse_trace(text, "recorded");
  int n_moe = 0;
  int dense_lead = -1;  // blocks before the first MoE block
  for (int64_t il = 0; il < cfg.n_layer; ++il) {
    const bool moe = cfg.moe_layer[static_cast<size_t>(il)];
    n_moe += moe ? 1 : 0;
    if (moe && dense_lead < 0) dense_lead = static_cast<int>(il);
  }
  REQUIRE(t.sequences.size() == 2);
  CHECK(t.header.n_layer == static_cast<uint32_t>(n_moe));
  CHECK(t.header.n_expert == static_cast<uint32_t>(cfg.n_expert));
  CHECK(t.header.topk == static_cast<uint32_t>(cfg.n_expert_used));
  CHECK(text.rfind("# model=deepseek2-q4_k_m ", 0) == 0);
  CHECK(text.find("source=sluice:" + model_path()) != std::string::npos);
  // 8 prompt tokens + 6 generated ones per sequence; each event lands at its token and layer.
  const size_t per_seq = tee.events.size() / 2;
  REQUIRE(per_seq == static_cast<size_t>(14 * n_moe));
  for (size_t i = 0; i < tee.events.size(); ++i) {
    const auto& e = tee.events[i];
    const int moe = e.layer - dense_lead;
    auto row = t.step(i / per_seq, static_cast<uint32_t>(e.pos), static_cast<uint32_t>(moe));
    REQUIRE(row.size() == e.experts.size());
    for (size_t k = 0; k < row.size(); ++k) CHECK(row[k] == static_cast<uint32_t>(e.experts[k]));
  }
}

TEST_CASE("warm start preloads exactly the profile's most-used shards that fit and counts no hit or miss") {
  core::EngineOptions probe = small_cache_options();
  uint32_t L = 0, E = 0;
  {
    core::Engine e(probe);
    L = e.cache()->layout().n_layer();
    E = e.cache()->layout().n_expert;
  }
  // Distinct counts in a scrambled order, a few shards never used.
  cache::ExpertProfile p;
  p.n_layer = L;
  p.n_expert = E;
  p.n_tokens = 100;
  p.counts.resize(static_cast<size_t>(L) * E);
  p.reuse_trials.assign(cache::kMaxReuseGap + 1, 0);
  p.reuse_hits.assign(cache::kMaxReuseGap + 1, 0);
  for (size_t i = 0; i < p.counts.size(); ++i) p.counts[i] = static_cast<double>((i * 37 + 11) % p.counts.size());
  core::EngineOptions o = small_cache_options();
  o.warm_profile = write_temp("scrambled.profile", cache::format_profile(p));
  core::Engine engine(o);
  REQUIRE(engine.has_warm_profile());
  cache::ShardCache& c = *engine.cache();

  // Expected: shards by descending count, each taken while its size class has a slot left.
  std::vector<size_t> order(p.counts.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p.counts[a] > p.counts[b]; });
  std::vector<uint64_t> room;
  for (const auto& sc : c.plan().classes) room.push_back(sc.n_slots);
  std::vector<bool> expect(p.counts.size(), false);
  uint64_t n_expect = 0;
  for (size_t i : order) {
    if (p.counts[i] == 0) continue;
    uint64_t& r = room[c.plan().class_of_layer[i / E]];
    if (r > 0) --r, expect[i] = true, ++n_expect;
  }
  REQUIRE(n_expect < p.counts.size());  // the cache is smaller than the model: the choice matters

  uint64_t last_done = 0, calls = 0;
  cache::WarmResult w = engine.warm_up([&](uint64_t done, uint64_t total) {
    CHECK(done > last_done);
    CHECK(done <= total);
    last_done = done;
    ++calls;
  });
  CHECK(w.shards == n_expect);
  CHECK(calls == n_expect);
  cache::CacheStats st = c.stats();
  CHECK(st.resident_shards == n_expect);
  CHECK(st.total.hits == 0);
  CHECK(st.total.misses == 0);
  CHECK(st.total.evictions == 0);
  CHECK(st.total.bytes_read == w.bytes);
  for (size_t i = 0; i < p.counts.size(); ++i) {
    CAPTURE(i);
    CHECK(c.is_resident({static_cast<uint32_t>(i / E), static_cast<uint32_t>(i % E)}) == expect[i]);
  }
}

TEST_CASE("a warm run gives logits bit-identical to a cold one and starts with more hits") {
  // The profile comes from a recorded run, as --profile-out writes it.
  std::string profile_path;
  std::vector<float> cold;
  uint64_t cold_hits = 0;
  {
    core::Engine engine(small_cache_options());
    core::TraceRecorder recorder(model_path());
    recorder.begin_sequence(engine.model().expert_geometry(), engine.session().n_ctx());
    engine.session().set_routing_observer(&recorder);
    cold = generate(engine, 8);
    cold_hits = engine.cache()->stats().total.hits;
    cache::ExpertProfile p = cache::build_profile(recorder.trace());
    profile_path = write_temp("run.profile", cache::format_profile(p));
    // The file round trips: the counts come back exactly.
    cache::ExpertProfile q = cache::parse_profile(test::read_text(profile_path), profile_path);
    CHECK(q.counts == p.counts);
    CHECK(q.n_tokens == 8 + 8);
  }
  core::EngineOptions o = small_cache_options();
  o.warm_profile = profile_path;
  core::Engine engine(o);
  cache::WarmResult w = engine.warm_up();
  CHECK(w.shards > 0);
  std::vector<float> warm = generate(engine, 8);
  REQUIRE(warm.size() == cold.size());
  CHECK(std::memcmp(warm.data(), cold.data(), warm.size() * sizeof(float)) == 0);
  CHECK(engine.cache()->stats().total.hits > cold_hits);
}

TEST_CASE("warm start refuses a profile of another model and a missing profile with one line") {
  cache::ExpertProfile p;
  p.n_layer = 3;
  p.n_expert = 5;
  p.n_tokens = 3;
  p.counts.assign(15, 1.0);
  p.reuse_trials.assign(cache::kMaxReuseGap + 1, 0);
  p.reuse_hits.assign(cache::kMaxReuseGap + 1, 0);
  core::EngineOptions o = small_cache_options();
  o.warm_profile = write_temp("other.profile", cache::format_profile(p));
  try {
    core::Engine e(o);
    FAIL("expected an error");
  } catch (const Error& e) {
    CAPTURE(e.what());
    CHECK(e.code() == ErrorCode::invalid_argument);
    CHECK(std::string(e.what()).find("is for 3 MoE layers x 5 experts") != std::string::npos);
  }
  o.warm_profile = (test::temp_dir("warm") / "absent.profile").string();
  try {
    core::Engine e(o);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::invalid_argument);
    CHECK(std::string(e.what()).find("cannot read profile") != std::string::npos);
  }
  auto r = run_sluice("run -m '" + model_path() + "' --tokens 1,2,3 -n 2 --cache-experts 40% --warm '" + o.warm_profile + "'");
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("cannot read profile") != std::string::npos);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
}

TEST_CASE("sluice run and bench write traces and profiles that sluice tune and --warm accept") {
  const auto dir = test::temp_dir("trace-cli");
  const std::string trace = (dir / "run.trace").string(), profile = (dir / "run.profile").string();
  auto r = run_sluice("run -m '" + model_path() + "' --tokens 1,2,3,4 -n 6 -c 64 --ignore-eos --cache-experts 40% --trace-out '" + trace +
                      "' --profile-out '" + profile + "'");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  cache::Trace t = cache::read_trace(trace);
  REQUIRE(t.sequences.size() == 1);
  CHECK(t.sequences[0].n_token == 4 + 6);  // prompt and every generated token
  cache::ExpertProfile p = cache::parse_profile(test::read_text(profile), profile);
  CHECK(p.counts == cache::build_profile(t).counts);

  auto tune = run_sluice("tune --trace '" + trace + "' --budgets 25%,50% --policies lru,belady");
  REQUIRE_MESSAGE(tune.exit_code == 0, tune.err);
  CHECK(tune.out.find("belady") != std::string::npos);

  const std::string bench_trace = (dir / "bench.trace").string();
  auto b = run_sluice("bench -m '" + model_path() + "' --cache-experts-sweep 40,60 -p 8 -n 10 -b 8 --probe-seconds 0 --json --warm '" +
                      profile + "' --trace-out '" + bench_trace + "'");
  REQUIRE_MESSAGE(b.exit_code == 0, b.err);
  for (const char* field : {"warm_shards", "warm_bytes", "warm_seconds", "hit_rate_first8", "hit_rate_steady",
                            "read_bytes_per_token_first8", "read_bytes_per_token_steady"}) {
    CHECK_MESSAGE(b.out.find(std::string("\"") + field + "\"") != std::string::npos, field);
  }
  cache::Trace bt = cache::read_trace(bench_trace);
  CHECK(bt.sequences.size() == 2);  // one per measured run
  for (const auto& s : bt.sequences) CHECK(s.n_token == 8 + 10);
}
