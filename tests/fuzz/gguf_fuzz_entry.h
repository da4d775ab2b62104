// The GGUF fuzz target's body, shared by the libFuzzer binary (fuzz_gguf.cpp) and the Release
// test suite (test_fuzz_regressions.cpp replays tests/fuzz/regressions through it).
//
// What one input goes through, with the production limits (GgufLimits' defaults: 64 MiB strings,
// 2 GiB header), exactly as `sluice` would see it as a file:
//   GgufFile::parse -> summarize -> the model checks a load runs before allocating anything:
//     kimi-k3: KimiK3Config::from_gguf + check_kimi_k3_tensors
//     others:  ModelConfig::from_gguf + check_tensors
// An even-length input is the whole file; an odd-length one is the head of a 1 TiB file (zeros
// after the input), so a header whose tensors lie beyond the input still reaches the model
// checks (scripts/fuzz_seeds.py makes such seeds).
//
// Contract: returns normally when the input parses or is rejected with sluice::Error; anything
// else (another exception, a crash, a hang, unbounded allocation) is a finding.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sluice::fuzz {

void gguf_one_input(const uint8_t* data, size_t size);

}  // namespace sluice::fuzz
