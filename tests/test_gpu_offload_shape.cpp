// What --gpu sees of each architecture, checked without a GPU: every weight product of a session
// is offered to its matmul offload (core/compute/matmul_offload.h), and the GPU model shape
// (core/gpu/gpu_model_shape.h) lists exactly the resident matrices those products use, in the
// order the forward pass first meets them; every other product is one part of a routed expert.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "common/ggml_type.h"
#include "core/architectures.h"
#include "core/engine.h"
#include "core/gpu/vram_plan.h"
#include "tests/reference_files.h"

using sluice::core::Engine;
using sluice::core::EngineOptions;

namespace {

// An offload that declines every product (the CPU computes it) and records the weight it saw.
struct RecordingOffload final : sluice::core::MatmulOffload {
  struct Product {
    const std::byte* data;
    uint64_t bytes;  // from the first row's start to the last row's end
  };
  std::vector<Product> seen;
  bool try_matmul(const sluice::kernels::WeightMatrix& w, const float*, int64_t, float*) override {
    const uint64_t row = sluice::ggml_row_bytes(w.type, static_cast<uint64_t>(w.n_cols));
    seen.push_back({w.data, static_cast<uint64_t>(w.n_rows - 1) * w.row_stride + row});
    return false;
  }
};

EngineOptions options_for(const sluice::test::ReferenceModel& m) {
  EngineOptions o;
  o.model_path = m.gguf().string();
  o.session.n_ctx = 64;
  o.session.kv_type = sluice::GgmlType::F32;
  o.threads = 2;
  return o;  // experts out of core, in the shard cache's arena
}

// Index of the resident matrix whose bytes hold [data, data + bytes), or -1.
int resident_holding(const sluice::core::GpuModelShape& shape, const std::byte* data, uint64_t bytes) {
  for (size_t i = 0; i < shape.resident.size(); ++i) {
    const std::byte* begin = shape.resident[i].tensor->data;
    if (data >= begin && data + bytes <= begin + shape.resident[i].bytes) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace

TEST_CASE("every reference model offers each weight product to the offload: the GPU shape's resident matrices in order of first use, or a routed expert's part") {
  const std::vector<int32_t> tokens{1, 5, 9, 13, 2, 7};
  for (const auto& m : sluice::test::supported_reference_models()) {
    CAPTURE(m.name());
    std::vector<float> plain;
    {
      Engine e(options_for(m));
      auto logits = e.forward(tokens, 0);
      plain.assign(logits.begin(), logits.end());
    }
    Engine e(options_for(m));
    const sluice::core::ArchitectureGpu* gpu = sluice::core::architecture_gpu(sluice::core::architecture_for(e.gguf()));
    REQUIRE(gpu != nullptr);  // --gpu is wired for every architecture
    const sluice::core::GpuModelShape shape = gpu->shape(e.model());
    REQUIRE(shape.resident.size() > 4);
    RecordingOffload rec;
    e.session().set_matmul_offload(&rec);
    auto logits = e.forward(tokens, 0);
    e.session().set_matmul_offload(nullptr);

    // Declined products leave the CPU's numbers unchanged, bit for bit.
    REQUIRE(logits.size() == plain.size());
    CHECK(std::memcmp(logits.data(), plain.data(), plain.size() * sizeof(float)) == 0);

    const std::span<std::byte> arena = e.cache()->arena_span();
    std::vector<int> first_use;
    int expert_products = 0, strays = 0;
    for (const auto& p : rec.seen) {
      const int r = resident_holding(shape, p.data, p.bytes);
      if (r >= 0) {
        if (std::find(first_use.begin(), first_use.end(), r) == first_use.end()) first_use.push_back(r);
        continue;
      }
      // Not resident: one whole part (gate, up or down) of an expert pinned in the cache arena.
      bool part = p.data >= arena.data() && p.data + p.bytes <= arena.data() + arena.size();
      bool sized = false;
      for (const auto& layer : shape.experts.part_bytes)
        sized = sized || std::find(layer.begin(), layer.end(), p.bytes) != layer.end();
      if (part && sized) ++expert_products;
      else ++strays;
    }
    CHECK(strays == 0);
    CHECK(expert_products > 0);
    // Every resident matrix is used, first in the order the shape lists them.
    std::vector<int> in_order(shape.resident.size());
    for (size_t i = 0; i < in_order.size(); ++i) in_order[i] = static_cast<int>(i);
    CHECK(first_use == in_order);
    CHECK(shape.max_dim >= e.n_vocab());
    CHECK(shape.experts.slot_bytes > 0);
  }
}
