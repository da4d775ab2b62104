// ShardCache against io::FaultInjectingReader: transient faults stay invisible, EIO reaches the
// caller as an error naming the shard and is retried, and flipped bits never reach compute.
#include <doctest/doctest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cache/shard_cache.h"
#include "common/error.h"
#include "io/fault_reader.h"
#include "io/pread_reader.h"
#include "tests/cache_test_util.h"

using namespace sluice::cache;
using sluice::Error;
using sluice::ErrorCode;
using sluice::test::CacheFixture;

namespace {

struct StepOutcome {
  int io_errors = 0;
  int corrupt_errors = 0;
  int wrong_bytes = 0;
  bool landed = false;
};

// Runs one step, retrying after errors (as the engine would) up to `tries` times.
StepOutcome step_with_retries(ShardCache& cache, const CacheFixture& fx, const std::vector<ShardKey>& keys,
                              int tries) {
  StepOutcome out;
  for (int attempt = 0; attempt < tries && !out.landed; ++attempt) {
    try {
      auto pins = cache.acquire_all(keys);
      for (size_t n = 0; n < pins.size(); ++n) {
        size_t i = cache.wait_any(pins);
        if (!fx.pin_matches(pins[i])) ++out.wrong_bytes;
        pins[i].release();
      }
      out.landed = true;
    } catch (const Error& e) {
      std::string what = e.what();
      CHECK(what.find("layer ") == 0);  // names the shard first
      CHECK(what.find("tensor 'blk.") != std::string::npos);
      if (e.code() == ErrorCode::io_error) ++out.io_errors;
      if (e.code() == ErrorCode::corrupt_data) ++out.corrupt_errors;
    }
  }
  return out;
}

ShardLayout with_digests(const CacheFixture& fx) {
  ShardLayout layout = fx.layout;
  sluice::io::PreadReader r(fx.path.string());
  for (auto& layer : layout.layers) {
    for (auto& t : layer.tensors) {
      for (uint32_t e = 0; e < layout.n_expert; ++e) {
        std::vector<std::byte> bytes(t.expert_bytes);
        r.read_sync(t.file_offset + e * t.expert_stride, bytes);
        t.digests.push_back(extent_digest(bytes));
      }
    }
  }
  return layout;
}

std::unique_ptr<sluice::io::FaultInjectingReader> faulty(const CacheFixture& fx, sluice::io::FaultOptions o) {
  auto inner = std::make_unique<sluice::io::PreadReader>(fx.path.string(), sluice::io::PreadOptions{.workers = 2});
  return std::make_unique<sluice::io::FaultInjectingReader>(std::move(inner), o);
}

std::vector<ShardKey> random_step(std::mt19937& rng, uint32_t n_layer, uint32_t n_expert) {
  uint32_t l = rng() % n_layer, a = rng() % n_expert, b = (a + 1 + rng() % (n_expert - 1)) % n_expert;
  return {{l, a}, {l, b}};
}

}  // namespace

TEST_CASE("short reads, EAGAIN and reordered completions never reach the forward pass") {
  CacheFixture fx(4, 16, true);
  sluice::io::FaultOptions fo;
  fo.seed = 11;
  fo.short_read_rate = 0.3;
  fo.eagain_rate = 0.2;
  fo.delay_rate = 0.4;
  auto reader = faulty(fx, fo);
  ShardCacheOptions o;
  o.budget_bytes = 6 * (12288 + 20480);
  ShardCache cache(with_digests(fx), *reader, o);
  std::mt19937 rng(3);
  int wrong = 0, errors = 0;
  for (int s = 0; s < 200; ++s) {
    StepOutcome r = step_with_retries(cache, fx, random_step(rng, 4, 16), 1);
    wrong += r.wrong_bytes;
    errors += r.io_errors + r.corrupt_errors;
  }
  CHECK(wrong == 0);
  CHECK(errors == 0);
  auto counts = reader->counts();
  CHECK(counts.short_reads > 0);
  CHECK(counts.eagains > 0);
  CHECK(counts.delays > 0);
}

TEST_CASE("a transient EIO fails the wait naming the shard and the retried read lands") {
  CacheFixture fx(4, 16, true);
  sluice::io::FaultOptions fo;
  fo.seed = 5;
  fo.transient_eio_rate = 0.2;
  auto reader = faulty(fx, fo);
  ShardCacheOptions o;
  o.budget_bytes = 6 * (12288 + 20480);
  ShardCache cache(fx.layout, *reader, o);
  std::mt19937 rng(9);
  int io_errors = 0, wrong = 0;
  for (int s = 0; s < 150; ++s) {
    StepOutcome r = step_with_retries(cache, fx, random_step(rng, 4, 16), 4);
    CHECK(r.landed);
    io_errors += r.io_errors;
    wrong += r.wrong_bytes;
  }
  CHECK(io_errors > 0);
  CHECK(wrong == 0);
  CHECK(cache.stats().pinned_shards == 0);
}

TEST_CASE("flipped bits are caught by slice digests and never handed to compute") {
  CacheFixture fx(4, 16, true);
  sluice::io::FaultOptions fo;
  fo.seed = 21;
  fo.bit_flip_rate = 0.15;
  auto reader = faulty(fx, fo);
  ShardCacheOptions o;
  o.budget_bytes = 6 * (12288 + 20480);
  ShardCache cache(with_digests(fx), *reader, o);
  std::mt19937 rng(17);
  int corrupt = 0, wrong = 0, landed = 0;
  for (int s = 0; s < 150; ++s) {
    StepOutcome r = step_with_retries(cache, fx, random_step(rng, 4, 16), 32);  // 15% of reads flip a bit: some steps need many retries
    corrupt += r.corrupt_errors;
    wrong += r.wrong_bytes;
    landed += r.landed;
  }
  CHECK(reader->counts().bit_flips > 0);
  CHECK(corrupt > 0);
  CHECK(wrong == 0);
  CHECK(landed == 150);
}
