// Read-ahead of the next MoE layer's experts during a large batch (prefill): the part every
// architecture's predictor shares (core/llama/expert_predictor.h, core/kimi_k3/kimi_k3_predictor.h).
//
// A batch of kReadAheadMinRows rows or more routes to most experts of every layer, more than a
// small cache holds, so each layer streams its experts through the cache and the disk would sit
// idle between two layers. The predictor applies the next MoE layer's router (its own routing
// rule) to read_ahead_rows(n) rows spread evenly over the batch (read_ahead_row), counts how often
// each expert is picked, and hands order_by_picks()'s list to ExpertSource::read_ahead, which
// reads them, the most picked first, into slots this layer no longer needs. Guesses never
// change results: they only decide what is read early.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace sluice::core {

inline constexpr int64_t kReadAheadMinRows = 16;  // batches from this many rows get a read-ahead
inline constexpr int64_t kReadAheadRows = 64;     // rows of such a batch that the read-ahead routes

inline int64_t read_ahead_rows(int64_t n) { return n < kReadAheadRows ? n : kReadAheadRows; }
// Row j of the s = read_ahead_rows(n) rows, spread evenly over a batch of n.
inline int64_t read_ahead_row(int64_t j, int64_t n, int64_t s) { return j * n / s; }

// Writes the experts with counts[e] > 0 to `list`, the most picked first (ties: the lower index
// first), and returns how many. `list` holds at least counts.size() entries. Allocates nothing.
size_t order_by_picks(std::span<const uint32_t> counts, std::span<int32_t> list);

}  // namespace sluice::core
