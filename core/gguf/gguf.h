// GGUF v2/v3 reader: header, metadata and tensor directory of a model file.
//
// Layout of a GGUF file (little-endian):
//   magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
//   n_kv x { string key | u32 value_type | value }
//   n_tensors x { string name | u32 n_dims | n_dims x i64 ne | u32 ggml_type | u64 offset }
//   padding to `general.alignment` (default 32) | tensor data
// Strings are u64 length + bytes (no terminator). Arrays are u32 elem_type + u64 count + elems.
// A tensor's `offset` is relative to the start of the data section and aligned to the alignment.
//
// The parser reads through an io::Reader in bounded chunks and trusts nothing: every length and
// count is compared with the bytes that remain in the file before anything is allocated, every
// size product is overflow checked, and every tensor's byte range must lie inside the file and
// not overlap another. Failures are sluice::Error(invalid_file / unsupported) whose message names
// the field, the value, the limit and the byte offset.
//
// Split models (llama.cpp's gguf-split): when the reader presents several files (io/split_set.h,
// io::Reader::parts()), every part is a complete GGUF file with its own tensors. parse() reads
// each part's header, checks the set (core/gguf/gguf_split.cpp: split.no, split.count and
// split.tensors.count of every part, parts of another model, duplicate tensors) and merges them
// into one directory: metadata from part 1 (later parts only carry the split.* keys), tensors of
// all parts in part order, each tensor's file_offset in the reader's address space. Everything
// that reads tensors through the same reader is then unaware of the split. A lone file that says
// it is part of a larger set (split.count > 1) but is not named like one is refused.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/ggml_type.h"
#include "io/reader.h"

namespace sluice::core {

enum class GgufValueType : uint32_t {
  u8 = 0, i8 = 1, u16 = 2, i16 = 3, u32 = 4, i32 = 5, f32 = 6, boolean = 7,
  string = 8, array = 9, u64 = 10, i64 = 11, f64 = 12,
};
std::string_view to_string(GgufValueType type);

// One metadata value. Scalars keep their stored type; integer accessors widen any integer type
// whose value fits, and reject everything else with an error naming the key and both types.
struct GgufValue {
  GgufValueType type = GgufValueType::u8;
  uint64_t u = 0;       // unsigned ints and bool
  int64_t i = 0;        // signed ints
  double f = 0;         // f32/f64
  std::string s;        // string
  // arrays
  GgufValueType elem_type = GgufValueType::u8;
  uint64_t count = 0;
  std::vector<std::string> strings;  // elem_type == string
  std::vector<std::byte> raw;        // numeric elements as stored (count x element size)
};

struct GgufKv {
  std::string key;
  GgufValue value;
  uint64_t file_offset = 0;  // where the key's record starts, for messages
};

struct GgufTensorInfo {
  std::string name;
  GgmlType type = GgmlType::F32;
  uint32_t n_dims = 0;
  std::array<int64_t, 4> ne{1, 1, 1, 1};  // ggml order: ne[0] is the contiguous dimension
  uint64_t offset = 0;       // relative to the data section (of its part)
  uint64_t file_offset = 0;  // absolute in the reader's address space: part base + data_offset + offset
  uint32_t part = 0;         // index into GgufFile::parts()
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;
  uint64_t row_bytes = 0;    // bytes of one ne[0] row (ggml nb[1])
};

// Denial-of-service limits; far above any real model (Kimi K3 has a few thousand tensors; the
// largest metadata arrays, vocabularies and merges, hold a few hundred thousand entries in a few
// MiB). max_array_bytes bounds the memory one parsed array takes: its elements' bytes, or for a
// string array sizeof(std::string) plus the length of each string. Without it, one count field
// of a sparse file claimed the whole header limit: 200 M zero-length strings (1.6 GB of file)
// parsed for minutes into 8 GiB of std::string (tests/fuzz/regressions/oom-empty-string-array).
struct GgufLimits {
  uint64_t max_tensors = 1u << 20;
  uint64_t max_kv = 1u << 16;
  uint64_t max_string_bytes = 1u << 26;
  uint64_t max_array_bytes = 1u << 26;
  uint64_t max_header_bytes = 1ull << 31;
};

// One file of the model: the file itself for a plain model, one part of a split model.
struct GgufPart {
  std::string path;
  uint64_t bytes = 0;
  uint64_t data_offset = 0;   // start of this part's tensor data, in the part
  uint64_t tensor_count = 0;
  uint64_t base = 0;          // where the reader's address space puts the part's byte 0
};

class GgufFile {
 public:
  // The whole model behind `reader`: one file, or every part of a split set (checked and merged).
  static GgufFile parse(io::Reader& reader, const GgufLimits& limits = {});
  // Exactly one GGUF file at [base, base + size) of the reader, taken as is: no set handling, and
  // split.* keys are plain metadata. `label` names it in messages (default: "'<reader path>'").
  static GgufFile parse_one(io::Reader& reader, uint64_t base, uint64_t size, const std::string& path,
                            const std::string& label = "", const GgufLimits& limits = {});

  uint32_t version() const { return version_; }
  uint64_t file_size() const { return file_size_; }      // bytes of all parts together
  uint64_t data_offset() const { return data_offset_; }  // part 1's
  const std::vector<GgufPart>& parts() const { return parts_; }
  bool is_split() const { return parts_.size() > 1; }
  uint32_t alignment() const { return alignment_; }
  const std::string& path() const { return path_; }

  // ---- metadata ----
  const std::vector<GgufKv>& metadata() const { return kvs_; }
  const GgufValue* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }
  // Required accessors throw Error(invalid_file) "missing key 'x'" or a type mismatch naming
  // the key, the stored type and the wanted type.
  uint64_t get_uint(std::string_view key) const;
  int64_t get_int(std::string_view key) const;
  double get_float(std::string_view key) const;  // f32/f64, or any integer
  bool get_bool(std::string_view key) const;
  const std::string& get_string(std::string_view key) const;
  const std::vector<std::string>& get_string_array(std::string_view key) const;
  std::vector<float> get_float_array(std::string_view key) const;
  std::vector<int64_t> get_int_array(std::string_view key) const;
  // Optional forms return the fallback when the key is absent (but still check the type).
  uint64_t get_uint_or(std::string_view key, uint64_t fallback) const;
  double get_float_or(std::string_view key, double fallback) const;
  bool get_bool_or(std::string_view key, bool fallback) const;
  std::string get_string_or(std::string_view key, std::string_view fallback) const;
  // general.architecture, or "" when absent.
  std::string architecture() const;

  // ---- tensors ----
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(std::string_view name) const;
  // Throws Error(invalid_file) "missing tensor 'x'".
  const GgufTensorInfo& tensor(std::string_view name) const;
  // Every block has tensors of its own, so a block_count beyond the tensor count is a lie; the
  // per-block tables and expected-tensor lists sized from it would grow with it (found by
  // fuzzing, as a timeout and as an out-of-memory). Throws Error(invalid_file) naming both.
  void check_block_count(uint64_t block_count) const;

 private:
  std::string path_;
  uint32_t version_ = 0;
  uint64_t file_size_ = 0;
  uint64_t data_offset_ = 0;
  uint32_t alignment_ = 32;
  std::vector<GgufKv> kvs_;
  std::unordered_map<std::string, size_t> kv_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
  std::vector<GgufPart> parts_;

  // core/gguf/gguf_split.cpp: checks a set's parts (parsed one by one) and merges them.
  static GgufFile merge_split(std::vector<GgufFile> parts, const std::vector<io::FilePart>& files);
  void check_not_a_lone_part() const;

  friend class GgufParser;
};

}  // namespace sluice::core
