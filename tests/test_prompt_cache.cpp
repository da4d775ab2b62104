// sluice run --prompt-cache (app/prompt_cache.h) and the Session state stream under it
// (Session::save_state/load_state): a run that reuses a saved prefix prints the same greedy text
// and writes the same logits rows for the tokens it computes as a run without the cache, on
// deepseek2, qwen3moe and kimi-k3; the reuse rule (a KV cache: the shared prefix; kimi-k3's
// recurrent state: all saved tokens or none); damaged, truncated and foreign files are one error
// line; --prompt-cache-ro never writes; --prompt-cache-all saves the generated tokens too.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "common/error.h"
#include "core/engine.h"
#include "tests/test_support.h"

namespace {

using namespace sluice::test;
namespace fs = std::filesystem;
using sluice::Error;
using sluice::ErrorCode;

struct CacheModel {
  const char* stem;
  bool recurrent;  // kimi-k3: the state cannot be cut to a shorter prefix
  fs::path gguf() const { return require_file(reference_dir() / (std::string(stem) + ".gguf")); }
  std::vector<int32_t> prompt() const {
    const auto j = nlohmann::json::parse(read_text(reference_dir() / (std::string(stem) + ".json")));
    return j["prompt_tokens"].get<std::vector<int32_t>>();
  }
};

const std::vector<CacheModel>& models() {
  static const std::vector<CacheModel> m{{"tiny/deepseek2/deepseek2-q4_k_m", false},
                                         {"tiny/qwen3moe/qwen3moe-q4_k_m", false},
                                         {"kimi-k3/kimi-k3-q4_k_m", true}};
  return m;
}

std::string ids(std::span<const int32_t> t) {
  std::string s;
  for (int32_t v : t) s += (s.empty() ? "" : ",") + std::to_string(v);
  return s;
}

std::vector<int32_t> head(const std::vector<int32_t>& t, size_t n) { return {t.begin(), t.begin() + static_cast<long>(n)}; }

// Greedy, f32 KV, 8 tokens; `extra` appended to the command line.
CommandResult run(const CacheModel& m, std::span<const int32_t> prompt, const std::string& extra) {
  return run_sluice("run -m '" + m.gguf().string() + "' --tokens " + ids(prompt) +
                    " -n 8 --temp 0 --ignore-eos -t 2 -c 64 --kv-type f32 " + extra);
}

// N of "prompt cache: N of M prompt tokens reused"; -1 when the line is missing.
long reused(const std::string& err) {
  const size_t at = err.find("prompt cache: ");
  const size_t of = err.find(" of ", at);
  if (at == std::string::npos || of == std::string::npos || err.find("prompt tokens reused", of) == std::string::npos)
    return -1;
  return std::stol(err.substr(at + 14, of - at - 14));
}

// Lines of stderr that report an error.
int error_lines(const std::string& err) {
  int n = 0;
  for (size_t at = err.find("error"); at != std::string::npos; at = err.find("error", at + 1)) ++n;
  return n;
}


class VectorSink final : public sluice::core::StateSink {
 public:
  void write(std::span<const std::byte> b) override { bytes.insert(bytes.end(), b.begin(), b.end()); }
  std::vector<std::byte> bytes;
};
class VectorSource final : public sluice::core::StateSource {
 public:
  explicit VectorSource(const std::vector<std::byte>& b) : bytes_(b) {}
  void read(std::span<std::byte> out) override {
    REQUIRE(at_ + out.size() <= bytes_.size());
    std::memcpy(out.data(), bytes_.data() + at_, out.size());
    at_ += out.size();
  }
  void skip(uint64_t n) override { at_ += n; }
  size_t consumed() const { return at_; }

 private:
  const std::vector<std::byte>& bytes_;
  size_t at_ = 0;
};

sluice::core::EngineOptions engine_options(const CacheModel& m) {
  sluice::core::EngineOptions o;
  o.model_path = m.gguf().string();
  o.session.n_ctx = 64;
  o.session.kv_type = sluice::GgmlType::F32;
  o.threads = 2;
  return o;
}

}  // namespace

std::vector<float> copy(std::span<const float> rows) { return {rows.begin(), rows.end()}; }

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

TEST_CASE("a session's exported state, imported into a fresh session, continues with bit-identical logits") {
  using sluice::core::Engine;
  for (const CacheModel& m : models()) {
    CAPTURE(m.stem);
    const std::vector<int32_t> all = m.prompt();
    const size_t np = 12;
    REQUIRE(all.size() > np + 4);
    const std::span<const int32_t> p(all.data(), np), q(all.data() + np, all.size() - np);

    VectorSink saved;
    {
      Engine a(engine_options(m));
      a.forward(p, 0);
      a.session().save_state(static_cast<int64_t>(np), saved);
      CHECK(saved.bytes.size() == a.session().state_shape().bytes(static_cast<int64_t>(np)));
      if (m.recurrent) {  // the carry is at exactly 12 tokens
        VectorSink other;
        CHECK_THROWS_AS(a.session().save_state(static_cast<int64_t>(np) - 1, other), Error);
      }
    }
    Engine c(engine_options(m));  // the whole prompt, no cache
    const size_t n_vocab = static_cast<size_t>(c.n_vocab());
    const std::vector<float> direct = copy(c.forward(all, 0));
    const std::span<const float> direct_q(direct.data() + np * n_vocab, q.size() * n_vocab);

    Engine b(engine_options(m));
    VectorSource src(saved.bytes);
    b.session().load_state(static_cast<int64_t>(np), static_cast<int64_t>(np), src);
    CHECK(src.consumed() == saved.bytes.size());
    const std::vector<float> resumed = copy(b.forward(q, static_cast<int64_t>(np)));
    CHECK(same_bits(resumed, direct_q));

    // A prefix of the saved tokens: a KV cache keeps the first 8 rows; a recurrent state refuses.
    Engine d(engine_options(m));
    VectorSource src8(saved.bytes);
    if (m.recurrent) {
      try {
        d.session().load_state(static_cast<int64_t>(np), 8, src8);
        FAIL("a recurrent state was cut to a shorter prefix");
      } catch (const Error& e) {
        CHECK(e.code() == ErrorCode::invalid_argument);
        CHECK(std::string(e.what()).find("cannot be cut") != std::string::npos);
      }
    } else {
      d.session().load_state(static_cast<int64_t>(np), 8, src8);
      CHECK(src8.consumed() == saved.bytes.size());
      const std::vector<float> from8 = copy(d.forward(std::span(all).subspan(8), 8));
      CHECK(same_bits(from8, std::span<const float>(direct.data() + 8 * n_vocab, (all.size() - 8) * n_vocab)));
    }
  }
}

TEST_CASE("sluice run with a prompt cache prints the same greedy text and logits rows as a run without it") {
  // Run A saves the state of P; run B (P + Q) reuses it and prefills only Q; run C is P + Q
  // without a cache. B's text equals C's, and B's --logits-out rows (Q's and the generated
  // tokens') equal C's last rows bit for bit.
  for (const CacheModel& m : models()) {
    CAPTURE(m.stem);
    ScopedTempDir dir("prompt_cache");
    const fs::path cache = dir.path() / "p.cache", lb = dir.path() / "b.f32", lc = dir.path() / "c.f32";
    const std::vector<int32_t> all = m.prompt();
    const size_t np = 12;
    const CommandResult a = run(m, head(all, np), "--prompt-cache '" + cache.string() + "'");
    REQUIRE_MESSAGE(a.exit_code == 0, a.err);
    CHECK(a.err.find("does not exist") != std::string::npos);
    CHECK(a.err.find("saved 12 tokens") != std::string::npos);
    const CommandResult b = run(m, all, "--prompt-cache '" + cache.string() + "' --logits-out '" + lb.string() + "'");
    REQUIRE_MESSAGE(b.exit_code == 0, b.err);
    CHECK(reused(b.err) == static_cast<long>(np));
    CHECK(b.err.find("saved " + std::to_string(all.size()) + " tokens") != std::string::npos);
    const CommandResult c = run(m, all, "--logits-out '" + lc.string() + "'");
    REQUIRE_MESSAGE(c.exit_code == 0, c.err);
    require_text(c.out, "the run without a cache");
    CHECK(b.out == c.out);
    const std::vector<uint8_t> rb = read_file(lb), rc = read_file(lc);
    const size_t n_rows = all.size() + 8, b_rows = n_rows - np;
    REQUIRE(rc.size() % n_rows == 0);
    const size_t row = rc.size() / n_rows;
    REQUIRE(rb.size() == b_rows * row);
    CHECK(std::memcmp(rb.data(), rc.data() + np * row, rb.size()) == 0);

    // The same prompt again: the last two tokens are computed (see the next case), so a KV cache
    // reuses all but them; a recurrent state holds the whole prompt and cannot step back: nothing.
    const CommandResult again = run(m, all, "--prompt-cache '" + cache.string() + "'");
    REQUIRE_MESSAGE(again.exit_code == 0, again.err);
    CHECK(again.out == c.out);
    CHECK(reused(again.err) == (m.recurrent ? 0 : static_cast<long>(all.size()) - 2));
  }
}

TEST_CASE("sluice run with a prompt cache one token short of the prompt still writes the logits rows of a run without it") {
  // F16 weights: a one-token forward sums in ggml's vector order, a batch in tinyBLAS's, so the
  // last bits differ. A KV cache recomputes the last two tokens instead of one; kimi-k3's
  // recurrent state, which cannot step back, is not reused.
  for (const CacheModel& m : {CacheModel{"tiny/deepseek2/deepseek2-f16", false}, CacheModel{"kimi-k3/kimi-k3-f16", true}}) {
    CAPTURE(m.stem);
    ScopedTempDir dir("prompt_cache");
    const fs::path cache = dir.path() / "p.cache", lb = dir.path() / "b.f32", lc = dir.path() / "c.f32";
    const std::vector<int32_t> all = m.prompt();
    REQUIRE(run(m, head(all, all.size() - 1), "--prompt-cache '" + cache.string() + "'").exit_code == 0);
    const CommandResult b = run(m, all, "--prompt-cache '" + cache.string() + "' --prompt-cache-ro --logits-out '" + lb.string() + "'");
    REQUIRE_MESSAGE(b.exit_code == 0, b.err);
    const long n_reused = m.recurrent ? 0 : static_cast<long>(all.size()) - 2;
    CHECK(reused(b.err) == n_reused);
    const CommandResult c = run(m, all, "--logits-out '" + lc.string() + "'");
    REQUIRE(c.exit_code == 0);
    CHECK(b.out == require_text(c.out, "the run without a cache"));
    const std::vector<uint8_t> rb = read_file(lb), rc = read_file(lc);
    const size_t row = rc.size() / (all.size() + 8);
    REQUIRE(rb.size() == (all.size() + 8 - static_cast<size_t>(n_reused)) * row);
    CHECK(std::memcmp(rb.data(), rc.data() + static_cast<size_t>(n_reused) * row, rb.size()) == 0);
  }
}

TEST_CASE("sluice run with a prompt cache reuses the shared prefix on a KV cache and only a whole saved prompt on kimi-k3") {
  // The file holds P (12 tokens); the new prompt keeps P's first 8 tokens and then differs.
  for (const CacheModel& m : models()) {
    CAPTURE(m.stem);
    ScopedTempDir dir("prompt_cache");
    const fs::path cache = dir.path() / "p.cache";
    const std::vector<int32_t> all = m.prompt();
    REQUIRE(run(m, head(all, 12), "--prompt-cache '" + cache.string() + "'").exit_code == 0);
    std::vector<int32_t> changed = head(all, 8);
    changed.insert(changed.end(), all.rbegin(), all.rbegin() + 10);  // different tokens from position 8
    REQUIRE(changed[8] != all[8]);
    const CommandResult b = run(m, changed, "--prompt-cache '" + cache.string() + "' --prompt-cache-ro");
    REQUIRE_MESSAGE(b.exit_code == 0, b.err);
    CHECK(reused(b.err) == (m.recurrent ? 0 : 8));
    if (m.recurrent) CHECK(b.err.find("reused only by a prompt that extends all its tokens by 2 or more") != std::string::npos);
    const CommandResult c = run(m, changed, "");
    REQUIRE(c.exit_code == 0);
    CHECK(b.out == require_text(c.out, "the run without a cache"));
  }
}

TEST_CASE("sluice run with a prompt cache saved at one context size reuses its prefix in a smaller one") {
  // 29 tokens saved at -c 64; a 20-token prompt at -c 24 keeps 18 (two are computed; the rows
  // past the context are read and dropped).
  const CacheModel& m = models()[0];
  ScopedTempDir dir("prompt_cache");
  const fs::path cache = dir.path() / "p.cache";
  const std::vector<int32_t> all = m.prompt();
  REQUIRE(all.size() > 24);
  REQUIRE(run(m, all, "--prompt-cache '" + cache.string() + "'").exit_code == 0);
  const CommandResult b = run(m, head(all, 20), "-c 24 -n 3 --prompt-cache '" + cache.string() + "' --prompt-cache-ro");
  REQUIRE_MESSAGE(b.exit_code == 0, b.err);
  CHECK(reused(b.err) == 18);
  const CommandResult c = run(m, head(all, 20), "-c 24 -n 3");
  CHECK(b.out == require_text(c.out, "the run without a cache"));
}

TEST_CASE("sluice run refuses a damaged, truncated or foreign prompt cache with one error line") {
  const CacheModel& ds = models()[0];
  const CacheModel& qwen = models()[1];
  ScopedTempDir dir("prompt_cache");
  const fs::path good = dir.path() / "good.cache", bad = dir.path() / "bad.cache";
  const std::vector<int32_t> all = ds.prompt();
  REQUIRE(run(ds, head(all, 12), "--prompt-cache '" + good.string() + "'").exit_code == 0);
  const std::vector<uint8_t> bytes = read_file(good);
  REQUIRE(bytes.size() > 1000);

  const auto refused = [&](const CacheModel& m, const std::vector<uint8_t>& file, const std::string& extra,
                           const std::string& message) {
    CAPTURE(message);
    write_file(bad, file);
    const CommandResult r = run(m, all, "--prompt-cache '" + bad.string() + "' " + extra);
    CHECK(r.exit_code != 0);
    CHECK(error_lines(r.err) == 1);
    CHECK_MESSAGE(r.err.find("sluice run: error: prompt cache '" + bad.string() + "'") != std::string::npos, r.err);
    CHECK_MESSAGE(r.err.find(message) != std::string::npos, r.err);
    CHECK(r.out.empty());  // nothing generated from a bad state
  };
  std::vector<uint8_t> flipped = bytes;
  flipped[bytes.size() - 100] ^= 0x10;  // inside the state
  refused(ds, flipped, "", "digest mismatch");
  flipped = bytes;
  flipped[bytes.size() - 4] ^= 0x01;  // inside the digest
  refused(ds, flipped, "", "digest mismatch");
  refused(ds, {bytes.begin(), bytes.end() - 1000}, "", "is truncated");
  refused(ds, {bytes.begin(), bytes.begin() + 20}, "", "is truncated");
  std::vector<uint8_t> longer = bytes;
  longer.push_back(0);
  refused(ds, longer, "", "is too long");
  refused(ds, std::vector<uint8_t>(64, 'x'), "", "is not a sluice prompt cache");
  refused(ds, bytes, "--kv-type f16", "holds a f32 KV cache; this run's is f16 (--kv-type)");
  // Another architecture, and another file of the same architecture.
  refused(qwen, bytes, "", "was saved by a 'deepseek2' model; this model is 'qwen3moe'");
  const CacheModel q8{"tiny/deepseek2/deepseek2-q8_0", false};
  refused(q8, bytes, "", "was saved by another model file");
  // The untouched file still loads.
  const CommandResult ok = run(ds, all, "--prompt-cache '" + good.string() + "' --prompt-cache-ro");
  CHECK_MESSAGE(ok.exit_code == 0, ok.err);
  CHECK(reused(ok.err) == 12);
}

TEST_CASE("sluice run with --prompt-cache-ro uses the prompt cache and never writes it") {
  const CacheModel& m = models()[2];  // kimi-k3: the saved prompt is extended
  ScopedTempDir dir("prompt_cache");
  const fs::path cache = dir.path() / "p.cache", missing = dir.path() / "missing.cache";
  const std::vector<int32_t> all = m.prompt();
  REQUIRE(run(m, head(all, 12), "--prompt-cache '" + cache.string() + "'").exit_code == 0);
  const std::vector<uint8_t> before = read_file(cache);
  const auto mtime = fs::last_write_time(cache);
  const CommandResult ro = run(m, all, "--prompt-cache '" + cache.string() + "' --prompt-cache-ro");
  REQUIRE_MESSAGE(ro.exit_code == 0, ro.err);
  CHECK(reused(ro.err) == 12);
  CHECK(ro.err.find("not updated (--prompt-cache-ro)") != std::string::npos);
  CHECK(ro.err.find("saved") == std::string::npos);
  CHECK(read_file(cache) == before);
  CHECK(fs::last_write_time(cache) == mtime);
  CHECK(!fs::exists(fs::path(cache.string() + ".tmp")));
  const CommandResult none = run(m, all, "--prompt-cache '" + missing.string() + "' --prompt-cache-ro");
  REQUIRE_MESSAGE(none.exit_code == 0, none.err);
  CHECK(!fs::exists(missing));
  // Without -ro the same run rewrites the file (the control: the checks above can fail).
  REQUIRE(run(m, all, "--prompt-cache '" + cache.string() + "'").exit_code == 0);
  CHECK(read_file(cache) != before);

  const CommandResult alone = run(m, all, "--prompt-cache-ro");
  CHECK(alone.exit_code != 0);
  CHECK(alone.err.find("--prompt-cache-ro needs --prompt-cache FILE") != std::string::npos);
}

TEST_CASE("sluice run with --prompt-cache-all saves the generated tokens in the prompt cache and a later prompt reuses them") {
  for (const CacheModel& m : {models()[0], models()[2]}) {
    CAPTURE(m.stem);
    ScopedTempDir dir("prompt_cache");
    const fs::path cache = dir.path() / "p.cache";
    const std::vector<int32_t> all = m.prompt();
    const std::vector<int32_t> p = head(all, 12);
    const fs::path logits = dir.path() / "a.f32";
    const CommandResult a =
        run(m, p, "--prompt-cache '" + cache.string() + "' --prompt-cache-all --logits-out '" + logits.string() + "'");
    REQUIRE_MESSAGE(a.exit_code == 0, a.err);
    CHECK(a.err.find("saved 20 tokens") != std::string::npos);  // 12 + 8 generated (the last is fed)
    // The generated ids: greedy, the argmax (lowest id on ties) of the row before each.
    const std::vector<uint8_t> raw = read_file(logits);
    REQUIRE(raw.size() % (20 * sizeof(float)) == 0);
    const size_t n_vocab = raw.size() / (20 * sizeof(float));
    std::vector<float> rows(raw.size() / sizeof(float));
    std::memcpy(rows.data(), raw.data(), raw.size());
    std::vector<int32_t> next = p;
    for (size_t s = 0; s < 8; ++s) {
      const float* row = rows.data() + (11 + s) * n_vocab;
      next.push_back(static_cast<int32_t>(std::max_element(row, row + n_vocab) - row));
    }
    next.insert(next.end(), all.begin() + 12, all.begin() + 17);
    const CommandResult b = run(m, next, "--prompt-cache '" + cache.string() + "' --prompt-cache-ro");
    REQUIRE_MESSAGE(b.exit_code == 0, b.err);
    CHECK(reused(b.err) == 20);
    const CommandResult c = run(m, next, "");
    CHECK(b.out == require_text(c.out, "the run without a cache"));
  }
}
