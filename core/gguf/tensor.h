// Tensor: a view of one GGUF tensor loaded into RAM, in its own ggml type and row layout.
//
// Every architecture's weights are Tensors (core/llama/model.h, core/kimi_k3/kimi_k3_model.h).
// A tensor left out of a load (streamed, or routed experts out of core) keeps its type, shape
// and row size with data == nullptr, so scratch can be sized from it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "common/ggml_type.h"
#include "kernels/matvec.h"

namespace sluice::core {

struct Tensor {
  GgmlType type = GgmlType::F32;
  std::array<int64_t, 4> ne{1, 1, 1, 1};
  const std::byte* data = nullptr;
  size_t row_bytes = 0;  // bytes of one ne[0] row

  explicit operator bool() const { return data != nullptr; }
  // The whole tensor as rows of ne[0] values (ne[1] * ne[2] rows).
  kernels::WeightMatrix matrix() const;
  // Matrix i2 of a 3-D tensor [ne0, ne1, ne2]: ne[1] rows of ne[0] values.
  kernels::WeightMatrix slice(int64_t i2) const;
  // Expert i2 of an expert tensor, as llama.cpp's mul_mat_id reads it: slice(i2), marked repacked
  // where llama.cpp repacks the tensor (kernels::ggml_repacks); slice() is a plain mul_mat's view.
  kernels::WeightMatrix expert(int64_t i2) const;
  // An F32 vector (1-D tensors are always F32 in memory).
  std::span<const float> f32() const;
};

}  // namespace sluice::core
