// Shared helpers for the ShardCache suites: a model-like file with known bytes, its layout, and
// readers that fail or reorder completions on demand.
#pragma once

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "cache/shard_layout.h"
#include "cache/trace.h"
#include "io/pread_reader.h"
#include "tests/test_support.h"

namespace sluice::test {

// A one-sequence routing trace of n_token tokens over n_layer layers, seeded: sticky and skewed
// like real routing (often last token's choice again, low ids favoured).
inline cache::Trace random_trace(uint32_t n_layer, uint32_t n_expert, uint32_t topk, uint32_t n_token, uint32_t seed) {
  std::mt19937 rng(seed);
  cache::Trace t;
  t.header = {"random", n_layer, n_expert, topk, {}};
  t.sequences.emplace_back();
  std::vector<uint32_t> prev(static_cast<size_t>(n_layer) * topk, 0);
  for (uint32_t tok = 0; tok < n_token; ++tok) {
    for (uint32_t l = 0; l < n_layer; ++l) {
      std::vector<uint32_t> chosen;
      while (chosen.size() < topk) {
        // Sticky and skewed, like real routing: often repeat last token's choice, favour low ids.
        uint32_t e = (rng() % 3 == 0) ? prev[l * topk + chosen.size()] : (rng() % n_expert) * (rng() % 2);
        while (std::find(chosen.begin(), chosen.end(), e) != chosen.end()) e = rng() % n_expert;
        chosen.push_back(e);
      }
      for (size_t k = 0; k < topk; ++k) prev[l * topk + k] = chosen[k];
      for (uint32_t e : chosen) t.sequences[0].experts.push_back(e);
    }
    ++t.sequences[0].n_token;
  }
  return t;
}

inline uint8_t file_byte(uint64_t offset) { return static_cast<uint8_t>((offset * 131 + (offset >> 8) * 7 + 3) & 0xff); }

// Two MoE layers x 4 experts, top-2, gate/up/down stacked per layer; the layers have different
// slice sizes, so their shards fall into two size classes (12 KiB and 20 KiB slots).
struct CacheFixture {
  std::filesystem::path path;
  cache::ShardLayout layout;
  uint64_t file_size = 0;

  explicit CacheFixture(uint32_t n_layer = 2, uint32_t n_expert = 4, bool two_classes = true) {
    layout.n_expert = n_expert;
    layout.n_expert_used = 2;
    uint64_t at = 100;  // not aligned on purpose
    for (uint32_t l = 0; l < n_layer; ++l) {
      bool big = two_classes && (l % 2 == 1);
      uint64_t sizes[3] = {big ? 5000u : 1000u, big ? 5000u : 1000u, big ? 100u : 500u};
      const char* names[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
      cache::LayerLayout ll;
      for (int t = 0; t < 3; ++t) {
        ll.tensors.push_back({"blk." + std::to_string(l) + "." + names[t] + ".weight", at, sizes[t] + 32, sizes[t], {}});
        at += (sizes[t] + 32) * n_expert;
      }
      layout.layers.push_back(ll);
    }
    file_size = at + 64;
    std::vector<uint8_t> bytes(file_size);
    for (uint64_t i = 0; i < file_size; ++i) bytes[i] = file_byte(i);
    path = temp_dir("cache") / "model.bin";
    write_file(path, bytes);
  }

  // True when every tensor slice in `pin` matches the file.
  template <class Pin>
  bool pin_matches(const Pin& pin) const {
    const auto& tensors = layout.layers[pin.key().layer].tensors;
    for (size_t t = 0; t < tensors.size(); ++t) {
      auto got = pin.tensor(t);
      uint64_t off = tensors[t].file_offset + pin.key().expert * tensors[t].expert_stride;
      if (got.size() != tensors[t].expert_bytes) return false;
      for (size_t i = 0; i < got.size(); ++i) {
        if (static_cast<uint8_t>(got[i]) != file_byte(off + i)) return false;
      }
    }
    return true;
  }
};

// Acquires, waits for and releases one step's shards; returns false when any byte is wrong.
template <class Cache>
bool run_step(Cache& cache, const CacheFixture& fx, const std::vector<cache::ShardKey>& keys) {
  auto pins = cache.acquire_all(keys);
  bool ok = true;
  for (size_t n = 0; n < pins.size(); ++n) {
    size_t i = cache.wait_any(pins);
    ok = ok && fx.pin_matches(pins[i]);
    pins[i].release();
  }
  return ok;
}

// Wraps a PreadReader: reads overlapping [fail_offset, fail_offset+1) complete with -EIO; every
// completion is reaped in reverse submission order when `lifo` is set.
class TestReader final : public io::Reader {
 public:
  explicit TestReader(const std::string& path) : inner_(path) {}
  std::string_view backend() const override { return "test"; }
  const std::string& path() const override { return inner_.path(); }
  uint64_t file_size() const override { return inner_.file_size(); }
  void submit(std::span<const io::ReadRequest> requests) override {
    std::lock_guard lock(mutex_);
    for (const auto& r : requests) {
      ++submitted;
      if ((reinterpret_cast<uintptr_t>(r.dst) - r.offset) % reported_alignment != 0) ++misplaced;
      int64_t result = static_cast<int64_t>(r.length);
      if (fail_offset != UINT64_MAX && r.offset <= fail_offset && fail_offset < r.offset + r.length) {
        result = -EIO;
      } else {
        inner_.read_sync(r.offset, std::span<std::byte>(r.dst, r.length));
        if (corrupt) r.dst[0] = static_cast<std::byte>(~static_cast<uint8_t>(r.dst[0]));
      }
      done_.push_back({r, result});
    }
  }
  size_t reap(std::span<io::Completion> out, size_t) override {
    std::lock_guard lock(mutex_);
    size_t n = 0;
    while (n < out.size() && !done_.empty()) {
      if (lifo) {
        out[n++] = done_.back();
        done_.pop_back();
      } else {
        out[n++] = done_.front();
        done_.pop_front();
      }
    }
    return n;
  }
  size_t in_flight() const override {
    std::lock_guard lock(mutex_);
    return done_.size();
  }
  void read_sync(uint64_t offset, std::span<std::byte> dst) override { inner_.read_sync(offset, dst); }
  uint32_t alignment() const override { return reported_alignment; }
  bool register_buffer(std::span<std::byte> region) override {
    registered = region;
    return false;
  }

  uint32_t reported_alignment = 1;
  std::span<std::byte> registered;
  uint64_t misplaced = 0;  // requests whose (dst - offset) % alignment != 0
  uint64_t fail_offset = UINT64_MAX;
  bool corrupt = false;
  bool lifo = false;
  uint64_t submitted = 0;

 private:
  io::PreadReader inner_;
  mutable std::mutex mutex_;
  std::deque<io::Completion> done_;
};

}  // namespace sluice::test
