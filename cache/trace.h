// Routing traces: which experts each token chose at each MoE layer (shared/traces/README.md).
//
// Text format, one header line then one line per (token, layer):
//   # model=<name> layers=<L> experts=<E> topk=<K> source=<...>
//   <sequence_id> <token_idx> <layer> <e1> ... <eK>
// Sequences count from 0, tokens from 0 within a sequence, layers 0..L-1 in order; every token
// has exactly L lines; each line has K distinct experts in 0..E-1.
//
// The reader is strict: any deviation is Error(invalid_file) naming the file, the line number
// and what was expected. In memory a sequence stores its experts flat:
//   experts[(token * n_layer + layer) * topk + k]   // [n_token, n_layer, topk]
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cache/eviction_policy.h"
#include "cache/shard_key.h"

namespace sluice::cache {

struct TraceHeader {
  std::string model;
  uint32_t n_layer = 0;
  uint32_t n_expert = 0;
  uint32_t topk = 0;
  std::vector<std::pair<std::string, std::string>> fields;  // all key=value pairs, in order
};

struct TraceSequence {
  uint32_t n_token = 0;
  std::vector<uint32_t> experts;  // [n_token, n_layer, topk]
};

struct Trace {
  TraceHeader header;
  std::vector<TraceSequence> sequences;

  std::span<const uint32_t> step(size_t seq, uint32_t token, uint32_t layer) const {
    const auto& s = sequences[seq];
    size_t k = header.topk;
    return {s.experts.data() + (static_cast<size_t>(token) * header.n_layer + layer) * k, k};
  }
  uint64_t n_tokens() const;
  size_t n_shards() const { return static_cast<size_t>(header.n_layer) * header.n_expert; }
};

// `name` is used in error messages (usually the path).
Trace parse_trace(std::string_view text, std::string_view name);
Trace read_trace(const std::filesystem::path& path);
std::string format_trace(const Trace& trace);
void write_trace(const std::filesystem::path& path, const Trace& trace);

// The order the forward pass touches shards while decoding sequence `seq`: token by token,
// layer by layer, experts in the order listed. This is the `future` Belady needs.
std::vector<ShardKey> access_sequence(const Trace& trace, size_t seq);

// Usage counts and reuse-by-gap statistics over the given sequences (all when empty).
ExpertProfile build_profile(const Trace& trace, std::span<const size_t> sequences = {});
// Profile file (`sluice tune --profile-out`), text:
//   # sluice expert profile layers=L experts=E tokens=N
//   layer <l> <E use counts>                  one line per layer, in order
//   reuse <gap> <trials> <hits>                reuse at the next visit by gap (0..kMaxReuseGap)
//   src <l> <i> <count>                        tokens choosing i at layer l-1 (l >= 1)
//   trans <l> <i> <j> <count>                  ... and j at layer l (non-zero cells only)
// The reader is strict like the trace reader (file, line number, what was expected).
std::string format_profile(const ExpertProfile& profile);
ExpertProfile parse_profile(std::string_view text, std::string_view name);

}  // namespace sluice::cache
