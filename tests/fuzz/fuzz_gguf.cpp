// libFuzzer target for the GGUF reader and the model checks: any byte string must either parse
// or be rejected with sluice::Error, never crash, hang or allocate without bound. The body is
// gguf_fuzz_entry.cpp (production limits; kimi-k3 and llama-family checks), which the Release
// tests also run on every saved input in tests/fuzz/regressions. Seeds: scripts/fuzz.
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/gguf_fuzz_entry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  sluice::fuzz::gguf_one_input(data, size);
  return 0;
}
