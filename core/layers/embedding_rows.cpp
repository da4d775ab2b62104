#include "core/layers/embedding_rows.h"

#include "common/error.h"
#include "io/pread_reader.h"
#include "kernels/quant.h"

namespace sluice::core {

const GgufTensorInfo* embeddings_stay_in_file(const GgufFile& f, bool requested, Tensor* table) {
  const GgufTensorInfo* t = f.find_tensor("token_embd.weight");
  if (!requested || t == nullptr || f.find_tensor("output.weight") == nullptr) return nullptr;
  table->type = t->type;
  table->ne = t->ne;
  table->row_bytes = t->row_bytes;
  return t;
}

EmbeddingRows::EmbeddingRows(const Tensor& table, const std::string& path, uint64_t file_offset)
    : table_(table),
      // Synchronous (no workers: one row per token is read on the calling thread) and buffered,
      // with the pages dropped after each read so the page cache does not grow behind the budget.
      file_(std::make_unique<io::PreadReader>(path, io::PreadOptions{.workers = 0, .drop_cache_after_read = true})),
      offset_(file_offset) {}

void EmbeddingRows::dequantize(std::span<const int32_t> tokens, std::span<std::byte> staging, float* out) const {
  const int64_t n_embd = table_.ne[0], n_vocab = table_.ne[1];
  for (size_t t = 0; t < tokens.size(); ++t) {
    const int32_t id = tokens[t];
    if (id < 0 || id >= n_vocab)
      throw Error(ErrorCode::invalid_argument, "token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                                   std::to_string(n_vocab) + ")");
    const std::byte* row = nullptr;
    if (file_) {
      const std::span<std::byte> dst = staging.first(table_.row_bytes);
      file_->read_sync(offset_ + static_cast<uint64_t>(id) * table_.row_bytes, dst);
      row = dst.data();
    } else {
      row = table_.data + static_cast<size_t>(id) * table_.row_bytes;
    }
    kernels::dequantize_row(table_.type, row, out + static_cast<int64_t>(t) * n_embd, n_embd);
  }
}

}  // namespace sluice::core
