#include "core/gguf/tensor.h"

#include "kernels/quant.h"

namespace sluice::core {

kernels::WeightMatrix Tensor::matrix() const {
  const int64_t rows = ne[1] * ne[2] * ne[3];
  const bool repacked = ne[2] == 1 && ne[3] == 1 && kernels::ggml_repacks(type, rows);
  return {type, data, ne[0], rows, row_bytes, repacked ? kernels::GgmlRepack::mul_mat : kernels::GgmlRepack::none};
}

kernels::WeightMatrix Tensor::slice(int64_t i2) const {
  return {type, data + static_cast<size_t>(i2) * static_cast<size_t>(ne[1]) * row_bytes, ne[0], ne[1],
          row_bytes};
}

kernels::WeightMatrix Tensor::expert(int64_t i2) const {
  kernels::WeightMatrix m = slice(i2);
  if (kernels::ggml_repacks(type, ne[1])) m.repack = kernels::GgmlRepack::mul_mat_id;
  return m;
}

std::span<const float> Tensor::f32() const {
  return {reinterpret_cast<const float*>(data), static_cast<size_t>(ne[0] * ne[1] * ne[2] * ne[3])};
}

}  // namespace sluice::core
