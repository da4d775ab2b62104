// Architecture: what the engine needs of a model family, and nothing about how it computes.
//
// An architecture (llama-family in core/llama, kimi-k3 in core/kimi_k3) is registered by its GGUF
// `general.architecture` names in core/architectures.cpp, the only place outside the
// architecture's own folder that tests a name. It offers:
//   plan(reader, options)   the file parsed and checked, every size known, no weight read;
//   load(reader, options)   the weights in RAM (routed experts and streamed layers left out as
//                           the options say); it may take over the planned model;
// and the model (ArchModel) states its sizes for given session options (the budget planner,
// core/arch/budget_plan.h, decides from them alone) and makes its Session (core/arch/session.h),
// which takes routed experts from an ExpertSource and, when the model was loaded with
// stream_layer_tensors, its blocks from the model's own LayerStream (one mechanism for every
// architecture: core/layers/streamed_layers.h).
//
// Sizes an ArchModel states (bytes):
//   weight_bytes()                 tensors load() keeps in RAM (a planned model: what it would)
//   kv_bytes(o)                    KV cache of o.n_seq sequences of o.n_ctx positions
//   recurrent_bytes(o)             recurrent state of o.n_seq sequences (0 without one)
//   scratch_bytes(o, threads)      activations and matmul scratch at o.n_batch rows
//   layer_layout()                 the units a layer cache streams (empty: nothing streams)
//   expert_geometry()              the routed experts (blk.N.ffn_{gate,up,down}_exps)
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "cache/shard_cache.h"
#include "cache/shard_layout.h"
#include "core/arch/session.h"
#include "core/experts/expert_source.h"
#include "core/experts/streamed_experts.h"
#include "core/gguf/checked_read.h"
#include "core/gguf/gguf.h"
#include "core/gguf/shard_index.h"
#include "io/reader.h"
#include "kernels/thread_pool.h"

namespace sluice::core {

struct ArchLoadOptions {
  bool widen_f16_to_f32 = false;    // every F16 tensor becomes F32 (exact)
  bool load_routed_experts = true;  // false: an out-of-core ExpertSource supplies them
  bool stream_layer_tensors = false;  // true: blocks' tensors used as stored stream (LayerStream)
  // Sees each tensor's file bytes as read (core/gguf/checked_read.h); false twice is
  // Error(corrupt_data). Every architecture's loader passes each tensor it reads through it.
  TensorCheck check_tensor = nullptr;
  // Set: tensors used as stored are used in place in this mapping of the file (its pages are the
  // page cache's) instead of being read into the weight arena (io/file_mapping.h says why).
  std::shared_ptr<const io::FileMapping> mapping = nullptr;
  // True: when the output head is a tensor of its own, token_embd stays in the file and a forward
  // reads the rows it needs (core/layers/embedding_rows.h says why); its bytes leave weight_bytes().
  bool embeddings_from_file = false;
};

// A model's streamed non-routed layers: the units a layer cache holds, read in a known order.
class LayerStream {
 public:
  virtual ~LayerStream() = default;
  virtual const cache::ShardLayout& layout() const = 0;
  // The cache is created after the session (its budget depends on the session's scratch).
  virtual void attach(cache::ShardCache& cache) = 0;
  // The layer cache's verify hook: Error(corrupt_data) naming the tensor whose digest differs.
  virtual void verify(cache::ShardKey key, std::span<const std::byte> slot, uint32_t alignment) const = 0;
};

class ArchModel {
 public:
  virtual ~ArchModel() = default;
  virtual const GgufFile& gguf() const = 0;
  virtual std::string describe() const = 0;
  virtual int64_t n_vocab() const = 0;
  virtual uint64_t weight_bytes() const = 0;
  virtual ExpertGeometry expert_geometry() const = 0;
  virtual uint64_t kv_bytes(const SessionOptions& options) const = 0;
  virtual uint64_t recurrent_bytes(const SessionOptions& options) const = 0;
  virtual uint64_t scratch_bytes(const SessionOptions& options, unsigned threads) const = 0;
  // Whether sessions predict experts ahead (SessionOptions::prefetch_depth is used).
  virtual bool predicts_experts() const = 0;
  // Whether a loaded model left token_embd in the file (ArchLoadOptions::embeddings_from_file).
  virtual bool embeddings_in_file() const = 0;
  // The layer cache's units of a model planned or loaded with stream_layer_tensors (empty
  // layout, n_layer() == 0: nothing streams).
  virtual cache::ShardLayout layer_layout() const = 0;
  // Starts streaming this model's layers (loaded with stream_layer_tensors): the model owns the
  // stream and its sessions read blocks from it. `index`: per-tensor digests for verify().
  virtual LayerStream& stream_layers(const ShardIndex* index) = 0;
  // The ExpertSource over routed experts loaded into RAM; Error(invalid_argument) without them.
  virtual std::unique_ptr<ExpertSource> in_core_experts() const = 0;
  // Error(unsupported) for options the architecture cannot run (e.g. more sequences).
  virtual std::unique_ptr<Session> create_session(ExpertSource& experts, kernels::ThreadPool& pool,
                                                  const SessionOptions& options) = 0;
};

class Architecture {
 public:
  virtual ~Architecture() = default;
  virtual std::string_view name() const = 0;
  virtual std::unique_ptr<ArchModel> plan(io::Reader& reader, const ArchLoadOptions& options) const = 0;
  // `planned`: this file's plan() with the same options, which load may take over (or null).
  virtual std::unique_ptr<ArchModel> load(io::Reader& reader, const ArchLoadOptions& options,
                                          std::unique_ptr<ArchModel> planned) const = 0;
  // Whether a model loaded with stream_layer_tensors streams its blocks (ArchModel::layer_layout).
  virtual bool can_stream_layers() const = 0;
};

}  // namespace sluice::core
