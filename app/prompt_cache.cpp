#include "app/prompt_cache.h"

#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <system_error>
#include <vector>

#include "app/serve_scheduler.h"
#include "common/error.h"
#include "common/units.h"
#include "core/engine.h"
#include "core/gguf/shard_index.h"

namespace sluice::core {

namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'S', 'L', 'U', 'I', 'C', 'E', 'P', 'C'};
constexpr uint64_t kChunkBytes = uint64_t{1} << 20;  // the skip and verify buffer
constexpr uint32_t kMaxArchName = 256;

struct Hasher {
  Hasher() : state(XXH3_createState()) {
    if (!state) throw Error(ErrorCode::internal, "XXH3_createState failed");
    XXH3_64bits_reset(state);
  }
  ~Hasher() { XXH3_freeState(state); }
  Hasher(const Hasher&) = delete;
  Hasher& operator=(const Hasher&) = delete;
  void update(const void* p, size_t n) { XXH3_64bits_update(state, p, n); }
  uint64_t digest() const { return XXH3_64bits_digest(state); }
  XXH3_state_t* state;
};

// The file's bytes before the state: the header and the token ids.
uint64_t header_bytes(const std::string& arch, uint64_t n_tokens) {
  const uint64_t fixed = 8 + 4 + 4 + arch.size() + 8 + 8 + 8 + 4 + 8 + 8 + 8;
  return fixed + checked_mul(n_tokens, sizeof(int32_t), "prompt cache tokens");
}

// Reads the file in order, hashing every byte; reports the offset of a short read.
class FileSource final : public StateSource {
 public:
  FileSource(const fs::path& path) : path_(path), in_(path, std::ios::binary) {
    if (!in_) throw Error(ErrorCode::io_error, "prompt cache '" + path.string() + "': cannot open for reading");
  }
  void read(std::span<std::byte> bytes) override {
    if (bytes.empty()) return;
    in_.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    if (in_.gcount() != static_cast<std::streamsize>(bytes.size()))
      throw Error(ErrorCode::corrupt_data, "prompt cache '" + path_.string() + "' is truncated: it ends at byte " +
                                               std::to_string(offset_ + static_cast<uint64_t>(in_.gcount())) +
                                               ", inside a field of " + std::to_string(bytes.size()) + " bytes at offset " +
                                               std::to_string(offset_));
    hash_.update(bytes.data(), bytes.size());
    offset_ += bytes.size();
  }
  void skip(uint64_t n) override {
    if (n && chunk_.empty()) chunk_.resize(static_cast<size_t>(kChunkBytes));
    while (n) {
      const size_t k = static_cast<size_t>(std::min(n, kChunkBytes));
      read({chunk_.data(), k});
      n -= k;
    }
  }
  template <class T>
  T value() {
    T v{};
    read(std::as_writable_bytes(std::span<T, 1>(&v, 1)));
    return v;
  }
  uint64_t digest() const { return hash_.digest(); }
  uint64_t offset() const { return offset_; }
  // The trailing digest, read without hashing it.
  uint64_t trailer() {
    uint64_t v = 0;
    in_.read(reinterpret_cast<char*>(&v), sizeof v);
    if (in_.gcount() != sizeof v)
      throw Error(ErrorCode::corrupt_data, "prompt cache '" + path_.string() + "' is truncated: no digest at offset " +
                                               std::to_string(offset_));
    return v;
  }

 private:
  fs::path path_;
  std::ifstream in_;
  Hasher hash_;
  uint64_t offset_ = 0;
  std::vector<std::byte> chunk_;
};

class FileSink final : public StateSink {
 public:
  FileSink(const fs::path& path) : path_(path), out_(path, std::ios::binary | std::ios::trunc) {
    if (!out_) throw Error(ErrorCode::io_error, "prompt cache '" + path.string() + "': cannot open for writing");
  }
  void write(std::span<const std::byte> bytes) override {
    out_.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    if (!out_) throw Error(ErrorCode::io_error, "prompt cache '" + path_.string() + "': write failed at byte " + std::to_string(size_));
    hash_.update(bytes.data(), bytes.size());
    size_ += bytes.size();
  }
  template <class T>
  void value(const T& v) {
    write(std::as_bytes(std::span<const T, 1>(&v, 1)));
  }
  uint64_t finish() {
    const uint64_t d = hash_.digest();
    out_.write(reinterpret_cast<const char*>(&d), sizeof d);
    out_.flush();
    if (!out_) throw Error(ErrorCode::io_error, "prompt cache '" + path_.string() + "': write failed at byte " + std::to_string(size_));
    out_.close();
    return size_ + sizeof d;
  }

 private:
  fs::path path_;
  std::ofstream out_;
  Hasher hash_;
  uint64_t size_ = 0;
};

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string kv_name(uint32_t type) {
  if (type == static_cast<uint32_t>(GgmlType::F16)) return "f16";
  if (type == static_cast<uint32_t>(GgmlType::F32)) return "f32";
  return "type " + std::to_string(type);
}

}  // namespace

PromptCacheKey prompt_cache_key(Engine& engine) {
  const ModelFingerprint fp = ShardIndex::fingerprint(engine.reader().path(), engine.gguf(), engine.reader());
  return {.architecture = engine.gguf().architecture(),
          .model_bytes = fp.file_size,
          .model_digest = fp.header_digest,
          .n_vocab = engine.n_vocab(),
          .shape = engine.session().state_shape()};
}

PromptCacheLoad load_prompt_cache(const fs::path& path, const PromptCacheKey& key, Session& session,
                                  std::span<const int32_t> prompt) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return {};
  const std::string name = "prompt cache '" + path.string() + "'";
  const uint64_t file_size = fs::file_size(path, ec);
  if (ec) throw Error(ErrorCode::io_error, name + ": cannot stat it (" + ec.message() + ")");
  FileSource in(path);
  char magic[8] = {};
  in.read(std::as_writable_bytes(std::span(magic)));
  if (std::memcmp(magic, kMagic, sizeof magic) != 0)
    throw Error(ErrorCode::invalid_file, name + " is not a sluice prompt cache (no SLUICEPC magic at offset 0)");
  if (const uint32_t v = in.value<uint32_t>(); v != kPromptCacheVersion)
    throw Error(ErrorCode::invalid_file, name + " has version " + std::to_string(v) + "; this sluice reads version " +
                                             std::to_string(kPromptCacheVersion));
  const uint32_t arch_len = in.value<uint32_t>();
  if (arch_len > kMaxArchName)
    throw Error(ErrorCode::corrupt_data, name + ": architecture name of " + std::to_string(arch_len) +
                                             " bytes at offset 12 (at most " + std::to_string(kMaxArchName) + ")");
  std::string arch(arch_len, '\0');
  in.read(std::as_writable_bytes(std::span(arch.data(), arch.size())));
  if (arch != key.architecture)
    throw Error(ErrorCode::invalid_file, name + " was saved by a '" + arch + "' model; this model is '" + key.architecture + "'");
  const uint64_t model_bytes = in.value<uint64_t>(), model_digest = in.value<uint64_t>();
  const uint64_t n_vocab = in.value<uint64_t>();
  if (model_bytes != key.model_bytes || model_digest != key.model_digest || n_vocab != static_cast<uint64_t>(key.n_vocab))
    throw Error(ErrorCode::invalid_file, name + " was saved by another model file (" + std::to_string(model_bytes) +
                                             " bytes, header digest " + hex64(model_digest) + "; this one: " +
                                             std::to_string(key.model_bytes) + " bytes, " + hex64(key.model_digest) + ")");
  const uint32_t kv_type = in.value<uint32_t>();
  if (kv_type != static_cast<uint32_t>(key.shape.kv_type))
    throw Error(ErrorCode::invalid_argument, name + " holds a " + kv_name(kv_type) + " KV cache; this run's is " +
                                                 kv_name(static_cast<uint32_t>(key.shape.kv_type)) + " (--kv-type)");
  SequenceStateShape shape{.kv_type = key.shape.kv_type};
  shape.fixed_bytes = in.value<uint64_t>();
  shape.bytes_per_token = in.value<uint64_t>();
  if (shape != key.shape)
    throw Error(ErrorCode::invalid_file, name + " has state of " + std::to_string(shape.fixed_bytes) + " + " +
                                             std::to_string(shape.bytes_per_token) + " bytes/token; this session's is " +
                                             std::to_string(key.shape.fixed_bytes) + " + " +
                                             std::to_string(key.shape.bytes_per_token));
  const uint64_t n_tokens = in.value<uint64_t>();
  // The size the header implies, checked before anything is allocated from n_tokens.
  const uint64_t max_tokens = file_size / sizeof(int32_t);
  const uint64_t expected = n_tokens > max_tokens || n_tokens == 0
                                ? 0
                                : header_bytes(arch, n_tokens) + shape.bytes(static_cast<int64_t>(n_tokens)) + sizeof(uint64_t);
  if (expected == 0)
    throw Error(ErrorCode::corrupt_data, name + ": " + std::to_string(n_tokens) + " tokens at offset " +
                                             std::to_string(in.offset() - 8) + " cannot fit its " +
                                             std::to_string(file_size) + " bytes");
  if (file_size != expected)
    throw Error(ErrorCode::corrupt_data, name + (file_size < expected ? " is truncated: " : " is too long: ") +
                                             std::to_string(file_size) + " bytes, its header says " +
                                             std::to_string(expected));
  std::vector<int32_t> saved(static_cast<size_t>(n_tokens));
  in.read(std::as_writable_bytes(std::span(saved)));

  PromptCacheLoad r{.found = true, .saved_tokens = static_cast<int64_t>(n_tokens)};
  // At least two prompt tokens are computed: a lone last token runs ggml's one-row form, whose
  // F16/F32 products sum in another order than the batch of a whole-prompt prefill (last bits),
  // and the rows must equal a run without the cache. A KV cache keeps one token less; a
  // recurrent state that would leave one token reuses nothing.
  size_t keep = reusable_prefix(saved, prompt, session.can_rewind());
  if (keep + 2 > prompt.size()) keep = session.can_rewind() && prompt.size() >= 2 ? prompt.size() - 2 : 0;
  r.reused = static_cast<int64_t>(keep);
  const uint64_t state = shape.bytes(r.saved_tokens);
  if (r.reused > 0) {
    session.load_state(r.saved_tokens, r.reused, in);
  } else {
    in.skip(state);  // verified all the same: a damaged file is reported, not silently ignored
  }
  if (in.trailer() != in.digest())
    throw Error(ErrorCode::corrupt_data, name + ": XXH3-64 digest mismatch over its " +
                                             std::to_string(file_size - sizeof(uint64_t)) +
                                             " bytes (the file was damaged or changed)");
  return r;
}

uint64_t save_prompt_cache(const fs::path& path, const PromptCacheKey& key, const Session& session,
                           std::span<const int32_t> tokens) {
  if (key.architecture.size() > kMaxArchName)
    throw Error(ErrorCode::internal, "architecture name '" + key.architecture + "' is too long for a prompt cache");
  fs::path tmp = path;
  tmp += ".tmp";
  uint64_t size = 0;
  try {
    FileSink out(tmp);
    out.write(std::as_bytes(std::span(kMagic)));
    out.value(kPromptCacheVersion);
    out.value(static_cast<uint32_t>(key.architecture.size()));
    out.write(std::as_bytes(std::span(key.architecture.data(), key.architecture.size())));
    out.value(key.model_bytes);
    out.value(key.model_digest);
    out.value(static_cast<uint64_t>(key.n_vocab));
    out.value(static_cast<uint32_t>(key.shape.kv_type));
    out.value(key.shape.fixed_bytes);
    out.value(key.shape.bytes_per_token);
    out.value(static_cast<uint64_t>(tokens.size()));
    out.write(std::as_bytes(tokens));
    session.save_state(static_cast<int64_t>(tokens.size()), out);
    size = out.finish();
    std::error_code ec;
    fs::rename(tmp, path, ec);
    if (ec) throw Error(ErrorCode::io_error, "prompt cache '" + path.string() + "': cannot rename " + tmp.string() + " over it (" + ec.message() + ")");
  } catch (...) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw;
  }
  return size;
}

}  // namespace sluice::core
