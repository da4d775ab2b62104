#include "core/gguf/gguf.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>

#include "common/error.h"
#include "common/units.h"

namespace sluice::core {

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
constexpr uint64_t kFirstChunk = 64 << 10;  // header bytes fetched by the first read
constexpr uint64_t kMaxChunk = 1 << 20;      // reads double up to this
constexpr uint32_t kMaxAlignment = 1 << 20;
constexpr size_t kMaxNameBytes = 63;     // ggml's GGML_MAX_NAME is 64 including the terminator

size_t value_type_size(GgufValueType t) {
  switch (t) {
    case GgufValueType::u8: case GgufValueType::i8: case GgufValueType::boolean: return 1;
    case GgufValueType::u16: case GgufValueType::i16: return 2;
    case GgufValueType::u32: case GgufValueType::i32: case GgufValueType::f32: return 4;
    case GgufValueType::u64: case GgufValueType::i64: case GgufValueType::f64: return 8;
    case GgufValueType::string: case GgufValueType::array: return 0;
  }
  return 0;
}

// Names the field being read, for error messages. The text is built only when a read fails:
// a 160k-entry vocabulary would otherwise cost a string allocation per element.
class FieldName {
 public:
  FieldName(const char* text)
      : object_(text), build_([](const void* o) { return std::string(static_cast<const char*>(o)); }) {}
  // `describe` (a callable returning std::string) must outlive the call this name is passed to.
  template <class Describe>
    requires std::is_invocable_r_v<std::string, const Describe&>
  FieldName(const Describe& describe)
      : object_(&describe), build_([](const void* o) { return (*static_cast<const Describe*>(o))(); }) {}
  std::string operator()() const { return build_(object_); }

 private:
  const void* object_;
  std::string (*build_)(const void*);
};

bool is_integer(GgufValueType t) {
  switch (t) {
    case GgufValueType::u8: case GgufValueType::i8: case GgufValueType::u16: case GgufValueType::i16:
    case GgufValueType::u32: case GgufValueType::i32: case GgufValueType::u64: case GgufValueType::i64:
      return true;
    default: return false;
  }
}

bool is_signed(GgufValueType t) {
  return t == GgufValueType::i8 || t == GgufValueType::i16 || t == GgufValueType::i32 ||
         t == GgufValueType::i64;
}

std::string quote(std::string_view s) { return "'" + std::string(s) + "'"; }

}  // namespace

std::string_view to_string(GgufValueType type) {
  switch (type) {
    case GgufValueType::u8: return "u8";
    case GgufValueType::i8: return "i8";
    case GgufValueType::u16: return "u16";
    case GgufValueType::i16: return "i16";
    case GgufValueType::u32: return "u32";
    case GgufValueType::i32: return "i32";
    case GgufValueType::f32: return "f32";
    case GgufValueType::boolean: return "bool";
    case GgufValueType::string: return "string";
    case GgufValueType::array: return "array";
    case GgufValueType::u64: return "u64";
    case GgufValueType::i64: return "i64";
    case GgufValueType::f64: return "f64";
  }
  return "invalid";
}

// Reads the header sequentially, fetching the file in chunks and never trusting a length before
// comparing it with the bytes that remain.
class GgufParser {
 public:
  GgufParser(io::Reader& reader, const GgufLimits& limits, uint64_t base, uint64_t size, std::string path,
             std::string label)
      : reader_(reader), limits_(limits), file_size_(size), base_(base), path_(std::move(path)),
        label_(label.empty() ? "'" + path_ + "'" : std::move(label)) {}

  GgufFile parse() {
    GgufFile f;
    f.path_ = path_;
    f.file_size_ = file_size_;

    uint32_t magic = read_u32("magic");
    if (magic != kMagic) {
      char text[5] = {};
      std::memcpy(text, &magic, 4);
      for (char& c : text) if (c && (c < 32 || c > 126)) c = '?';
      fail("bad magic '" + std::string(text) + "' at offset 0: not a GGUF file");
    }
    uint64_t at = pos_;
    f.version_ = read_u32("version");
    if (f.version_ == 0x02000000u || f.version_ == 0x03000000u) {
      fail_at(at, "big-endian GGUF files are not supported");
    }
    if (f.version_ == 1) fail_at(at, "GGUF version 1 is not supported (only versions 2 and 3)");
    if (f.version_ < 2 || f.version_ > 3) {
      fail_at(at, "GGUF version " + std::to_string(f.version_) + " is not supported (only versions 2 and 3)");
    }
    at = pos_;
    uint64_t n_tensors = read_u64("n_tensors");
    if (n_tensors > limits_.max_tensors) {
      fail_at(at, "n_tensors = " + std::to_string(n_tensors) + " exceeds the limit of " +
                      std::to_string(limits_.max_tensors));
    }
    at = pos_;
    uint64_t n_kv = read_u64("n_kv");
    if (n_kv > limits_.max_kv) {
      fail_at(at, "n_kv = " + std::to_string(n_kv) + " exceeds the limit of " + std::to_string(limits_.max_kv));
    }

    for (uint64_t i = 0; i < n_kv; ++i) {
      GgufKv kv;
      kv.file_offset = pos_;
      kv.key = read_string([&] { return "metadata key #" + std::to_string(i); });
      if (kv.key.empty()) fail_at(kv.file_offset, "metadata key #" + std::to_string(i) + " is empty");
      if (f.kv_index_.count(kv.key)) fail_at(kv.file_offset, "duplicate metadata key " + quote(kv.key));
      uint64_t type_at = pos_;
      uint32_t raw_type = read_u32([&] { return "value type of " + quote(kv.key); });
      if (raw_type > static_cast<uint32_t>(GgufValueType::f64)) {
        fail_at(type_at, "metadata key " + quote(kv.key) + " has value type " + std::to_string(raw_type) +
                             ", out of range (0..12)");
      }
      kv.value.type = static_cast<GgufValueType>(raw_type);
      read_value(kv.key, kv.value);
      f.kv_index_.emplace(kv.key, f.kvs_.size());
      f.kvs_.push_back(std::move(kv));
    }

    // general.alignment: u32, power of two, at most 1 MiB.
    if (const GgufValue* a = f.find("general.alignment")) {
      const GgufKv& kv = f.kvs_[f.kv_index_.at("general.alignment")];
      if (a->type != GgufValueType::u32) {
        fail_at(kv.file_offset, "general.alignment must be u32, found " + std::string(to_string(a->type)));
      }
      if (a->u == 0 || (a->u & (a->u - 1)) != 0 || a->u > kMaxAlignment) {
        fail_at(kv.file_offset, "general.alignment = " + std::to_string(a->u) +
                                    " must be a power of two between 1 and 1048576");
      }
      f.alignment_ = static_cast<uint32_t>(a->u);
    }

    for (uint64_t i = 0; i < n_tensors; ++i) f.tensors_.push_back(read_tensor_info(f, i));

    // A vocabulary-only file ends right after its header, before the padding that would precede
    // tensor data; each tensor's range is checked against the file size below.
    f.data_offset_ = align_up(pos_, f.alignment_);
    check_tensor_ranges(f);
    f.parts_.push_back(GgufPart{path_, file_size_, f.data_offset_, f.tensors_.size(), base_});
    return f;
  }

 private:
  [[noreturn]] void fail(const std::string& message) const {
    throw Error(ErrorCode::invalid_file, label_ + ": " + message);
  }
  [[noreturn]] void fail_at(uint64_t offset, const std::string& message) const {
    fail(message + " (at byte offset " + std::to_string(offset) + ")");
  }

  static uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

  // Makes [pos_, pos_ + n) available in buf_, reading more of the file as needed.
  void need(uint64_t n, FieldName what) {
    if (n > file_size_ - std::min(pos_, file_size_)) {
      fail_at(pos_, "file truncated while reading " + what() + ": needs " + std::to_string(n) +
                        " bytes, " + std::to_string(file_size_ - std::min(pos_, file_size_)) + " remain");
    }
    uint64_t end = pos_ + n;
    if (end <= buf_start_ + buf_.size()) return;
    if (end > limits_.max_header_bytes) {
      fail_at(pos_, "GGUF header exceeds " + std::to_string(limits_.max_header_bytes) + " bytes");
    }
    // Drop bytes before pos_, then append up to at least `end`.
    uint64_t keep_from = pos_ - buf_start_;
    buf_.erase(buf_.begin(), buf_.begin() + static_cast<ptrdiff_t>(keep_from));
    buf_start_ = pos_;
    uint64_t have_end = buf_start_ + buf_.size();
    // Chunks double from 64 KiB: a small file (or a fuzzer's input) is not padded to 1 MiB.
    chunk_ = std::min(kMaxChunk, chunk_ == 0 ? kFirstChunk : chunk_ * 2);
    uint64_t want_end = std::min(file_size_, std::max(end, have_end + chunk_));
    size_t old = buf_.size();
    buf_.resize(static_cast<size_t>(want_end - buf_start_));
    reader_.read_sync(base_ + have_end, std::span<std::byte>(buf_.data() + old, buf_.size() - old));
  }

  const std::byte* take(uint64_t n, FieldName what) {
    need(n, what);
    const std::byte* p = buf_.data() + (pos_ - buf_start_);
    pos_ += n;
    return p;
  }

  template <class T>
  T read_scalar(FieldName what) {
    T v;
    std::memcpy(&v, take(sizeof(T), what), sizeof(T));
    return v;
  }
  uint32_t read_u32(FieldName what) { return read_scalar<uint32_t>(what); }
  uint64_t read_u64(FieldName what) { return read_scalar<uint64_t>(what); }

  std::string read_string(FieldName what) {
    uint64_t at = pos_;
    uint64_t len = read_u64([&] { return "length of " + what(); });
    uint64_t remain = file_size_ - pos_;
    if (len > remain) {
      fail_at(at, what() + " has length " + std::to_string(len) + ", beyond end of file (" +
                      std::to_string(remain) + " bytes remain)");
    }
    if (len > limits_.max_string_bytes) {
      fail_at(at, what() + " has length " + std::to_string(len) + ", above the limit of " +
                      std::to_string(limits_.max_string_bytes));
    }
    const std::byte* p = take(len, what);
    return std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(len));
  }

  void read_scalar_value(GgufValueType t, GgufValue& v, FieldName what) {
    switch (t) {
      case GgufValueType::u8: v.u = read_scalar<uint8_t>(what); break;
      case GgufValueType::i8: v.i = read_scalar<int8_t>(what); break;
      case GgufValueType::u16: v.u = read_scalar<uint16_t>(what); break;
      case GgufValueType::i16: v.i = read_scalar<int16_t>(what); break;
      case GgufValueType::u32: v.u = read_scalar<uint32_t>(what); break;
      case GgufValueType::i32: v.i = read_scalar<int32_t>(what); break;
      case GgufValueType::u64: v.u = read_scalar<uint64_t>(what); break;
      case GgufValueType::i64: v.i = read_scalar<int64_t>(what); break;
      case GgufValueType::f32: v.f = read_scalar<float>(what); break;
      case GgufValueType::f64: v.f = read_scalar<double>(what); break;
      case GgufValueType::boolean: {
        uint64_t at = pos_;
        uint8_t b = read_scalar<uint8_t>(what);
        if (b > 1) fail_at(at, what() + " is a bool with value " + std::to_string(b) + " (must be 0 or 1)");
        v.u = b;
        break;
      }
      case GgufValueType::string: v.s = read_string(what); break;
      case GgufValueType::array: break;
    }
  }

  void read_value(const std::string& key, GgufValue& v) {
    const auto what = [&] { return "value of " + quote(key); };
    if (v.type != GgufValueType::array) {
      read_scalar_value(v.type, v, what);
      return;
    }
    uint64_t at = pos_;
    uint32_t raw_elem = read_u32([&] { return "array type of " + quote(key); });
    if (raw_elem > static_cast<uint32_t>(GgufValueType::f64)) {
      fail_at(at, "array " + quote(key) + " has element type " + std::to_string(raw_elem) +
                      ", out of range (0..12)");
    }
    v.elem_type = static_cast<GgufValueType>(raw_elem);
    if (v.elem_type == GgufValueType::array) fail_at(at, "array " + quote(key) + " holds arrays (nested arrays are not supported)");
    uint64_t count_at = pos_;
    v.count = read_u64([&] { return "array count of " + quote(key); });
    uint64_t remain = file_size_ - pos_;
    if (v.elem_type == GgufValueType::string) {
      // Each string needs at least its 8-byte length.
      if (v.count > remain / 8) {
        fail_at(count_at, "array " + quote(key) + " claims " + std::to_string(v.count) +
                              " strings, more than the " + std::to_string(remain) + " remaining bytes can hold");
      }
      // Memory, not file bytes: an empty string is 8 bytes of file and a whole std::string.
      constexpr uint64_t kStringBytes = sizeof(std::string);
      if (v.count > limits_.max_array_bytes / kStringBytes) {
        fail_at(count_at, "array " + quote(key) + " claims " + std::to_string(v.count) + " strings, above the limit of " +
                              std::to_string(limits_.max_array_bytes) + " bytes for one array");
      }
      // Reserve no more than the header limit could back (a claimed count is not yet bytes read;
      // fuzzing found a 2 GiB reservation from one count field). The vector grows past that
      // only as real strings are read.
      const uint64_t header_room = limits_.max_header_bytes > pos_ ? limits_.max_header_bytes - pos_ : 0;
      v.strings.reserve(static_cast<size_t>(std::min<uint64_t>({v.count, header_room / 8, 1u << 20})));
      const uint64_t array_start = pos_;
      uint64_t memory = v.count * kStringBytes;
      for (uint64_t i = 0; i < v.count; ++i) {
        v.strings.push_back(read_string([&] { return "element " + std::to_string(i) + " of " + quote(key); }));
        memory += v.strings.back().size();
        if (memory > limits_.max_array_bytes) {
          fail_at(array_start, "array " + quote(key) + " of " + std::to_string(v.count) + " strings exceeds the limit of " +
                                   std::to_string(limits_.max_array_bytes) + " bytes for one array at element " +
                                   std::to_string(i));
        }
      }
      return;
    }
    size_t elem = value_type_size(v.elem_type);
    uint64_t bytes = 0;
    if (__builtin_mul_overflow(v.count, static_cast<uint64_t>(elem), &bytes)) {
      fail_at(count_at, "array " + quote(key) + " size " + std::to_string(v.count) + " x " +
                            std::to_string(elem) + " bytes overflows 64 bits");
    }
    if (bytes > remain) {
      fail_at(count_at, "array " + quote(key) + " of " + std::to_string(v.count) + " x " +
                            std::to_string(elem) + " bytes extends beyond end of file (" +
                            std::to_string(remain) + " bytes remain)");
    }
    if (bytes > limits_.max_array_bytes) {
      fail_at(count_at, "array " + quote(key) + " of " + std::to_string(v.count) + " x " + std::to_string(elem) +
                            " bytes is above the limit of " + std::to_string(limits_.max_array_bytes) +
                            " bytes for one array");
    }
    const std::byte* p = take(bytes, what);
    if (v.elem_type == GgufValueType::boolean) {
      for (uint64_t i = 0; i < bytes; ++i) {
        if (static_cast<uint8_t>(p[i]) > 1) {
          fail("array " + quote(key) + " element " + std::to_string(i) + " is a bool with value " +
               std::to_string(static_cast<uint8_t>(p[i])));
        }
      }
    }
    v.raw.assign(p, p + bytes);
  }

  GgufTensorInfo read_tensor_info(GgufFile& f, uint64_t index) {
    GgufTensorInfo t;
    uint64_t at = pos_;
    std::string label = "tensor #" + std::to_string(index);
    t.name = read_string([&] { return "name of " + label; });
    if (t.name.empty()) fail_at(at, label + " has an empty name");
    if (t.name.size() > kMaxNameBytes) {
      fail_at(at, label + " name '" + t.name.substr(0, 80) + "' is " + std::to_string(t.name.size()) +
                      " bytes long (limit 63)");
    }
    if (f.tensor_index_.count(t.name)) fail_at(at, "duplicate tensor name " + quote(t.name));
    label = "tensor " + quote(t.name);
    uint64_t dims_at = pos_;
    t.n_dims = read_u32([&] { return "n_dims of " + label; });
    if (t.n_dims == 0 || t.n_dims > 4) {
      fail_at(dims_at, label + " has n_dims = " + std::to_string(t.n_dims) + " (must be 1..4)");
    }
    uint64_t n_elements = 1;
    for (uint32_t d = 0; d < t.n_dims; ++d) {
      uint64_t ne_at = pos_;
      int64_t ne = read_scalar<int64_t>([&] { return "ne[" + std::to_string(d) + "] of " + label; });
      if (ne <= 0) {
        fail_at(ne_at, label + " has ne[" + std::to_string(d) + "] = " + std::to_string(ne) + " (must be > 0)");
      }
      t.ne[d] = ne;
      if (__builtin_mul_overflow(n_elements, static_cast<uint64_t>(ne), &n_elements) ||
          n_elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        fail_at(ne_at, label + " element count overflows 64 bits");
      }
    }
    t.n_elements = n_elements;
    uint64_t type_at = pos_;
    uint32_t raw_type = read_u32([&] { return "type of " + label; });
    if (ggml_type_removed(raw_type)) {
      fail_at(type_at, label + " uses ggml type id " + std::to_string(raw_type) +
                           ", which ggml has removed (re-convert the model)");
    }
    auto traits = ggml_type_traits(raw_type);
    if (!traits) fail_at(type_at, label + " has unknown ggml type id " + std::to_string(raw_type));
    t.type = traits->type;
    if (t.ne[0] % traits->block_size != 0) {
      fail_at(type_at, label + " has ne[0] = " + std::to_string(t.ne[0]) + ", not a multiple of the " +
                           std::string(traits->name) + " block size " + std::to_string(traits->block_size));
    }
    uint64_t rows = n_elements / static_cast<uint64_t>(t.ne[0]);
    t.row_bytes = static_cast<uint64_t>(t.ne[0]) / traits->block_size * traits->type_size;
    if (__builtin_mul_overflow(t.row_bytes, rows, &t.n_bytes)) {
      fail_at(type_at, label + " byte size overflows 64 bits");
    }
    uint64_t off_at = pos_;
    t.offset = read_u64([&] { return "offset of " + label; });
    if (t.offset % f.alignment_ != 0) {
      fail_at(off_at, label + " offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
                          std::to_string(f.alignment_));
    }
    f.tensor_index_.emplace(t.name, f.tensors_.size());
    return t;
  }

  void check_tensor_ranges(GgufFile& f) {
    std::vector<size_t> order(f.tensors_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    for (GgufTensorInfo& t : f.tensors_) {
      uint64_t end = 0;
      if (__builtin_add_overflow(f.data_offset_, t.offset, &t.file_offset) ||
          __builtin_add_overflow(t.file_offset, t.n_bytes, &end)) {
        fail("tensor " + quote(t.name) + " data range (offset " + std::to_string(t.offset) + ", " +
             std::to_string(t.n_bytes) + " bytes) wraps around 64 bits");
      }
      if (end > file_size_) {
        fail("tensor " + quote(t.name) + " ends at " + human_bytes(end) + " (byte " + std::to_string(end) +
             "), past end of file (" + human_bytes(file_size_) + ", " + std::to_string(file_size_) + " bytes)");
      }
    }
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return f.tensors_[a].offset < f.tensors_[b].offset; });
    for (size_t k = 1; k < order.size(); ++k) {
      const GgufTensorInfo& prev = f.tensors_[order[k - 1]];
      const GgufTensorInfo& cur = f.tensors_[order[k]];
      if (prev.n_bytes > 0 && cur.offset < prev.offset + prev.n_bytes) {
        fail("tensors " + quote(prev.name) + " and " + quote(cur.name) + " overlap (" + quote(cur.name) +
             " starts at data offset " + std::to_string(cur.offset) + ", inside " + quote(prev.name) +
             " which ends at " + std::to_string(prev.offset + prev.n_bytes) + ")");
      }
    }
  }

  io::Reader& reader_;
  GgufLimits limits_;
  uint64_t file_size_;
  uint64_t base_;  // where this file starts in the reader's address space
  std::string path_, label_;
  uint64_t pos_ = 0;
  uint64_t buf_start_ = 0;
  uint64_t chunk_ = 0;
  std::vector<std::byte> buf_;
};

GgufFile GgufFile::parse_one(io::Reader& reader, uint64_t base, uint64_t size, const std::string& path,
                            const std::string& label, const GgufLimits& limits) {
  return GgufParser(reader, limits, base, size, path, label).parse();
}

GgufFile GgufFile::parse(io::Reader& reader, const GgufLimits& limits) {
  const std::vector<io::FilePart> files = reader.parts();
  if (files.size() <= 1) {
    GgufFile f = parse_one(reader, 0, reader.file_size(), reader.path(), "", limits);
    f.check_not_a_lone_part();
    return f;
  }
  std::vector<GgufFile> parts;
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string label = "part " + std::to_string(i + 1) + " of " + std::to_string(files.size()) + " '" +
                              files[i].path + "'";
    parts.push_back(parse_one(reader, files[i].base, files[i].bytes, files[i].path, label, limits));
  }
  GgufFile merged = merge_split(std::move(parts), files);
  merged.path_ = reader.path();
  return merged;
}

// ---- metadata access ----

namespace {

[[noreturn]] void type_mismatch(std::string_view key, GgufValueType stored, std::string_view wanted) {
  throw Error(ErrorCode::invalid_file, "metadata key '" + std::string(key) + "' is " +
                                           std::string(to_string(stored)) + ", expected " + std::string(wanted));
}

}  // namespace

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = kv_index_.find(std::string(key));
  return it == kv_index_.end() ? nullptr : &kvs_[it->second].value;
}

static const GgufValue& require(const GgufFile& f, std::string_view key) {
  const GgufValue* v = f.find(key);
  if (!v) throw Error(ErrorCode::invalid_file, "'" + f.path() + "': missing metadata key '" + std::string(key) + "'");
  return *v;
}

uint64_t GgufFile::get_uint(std::string_view key) const {
  const GgufValue& v = require(*this, key);
  if (!is_integer(v.type)) type_mismatch(key, v.type, "an unsigned integer");
  if (is_signed(v.type)) {
    if (v.i < 0) {
      throw Error(ErrorCode::invalid_file, "metadata key '" + std::string(key) + "' is " + std::to_string(v.i) +
                                               ", expected a non-negative integer");
    }
    return static_cast<uint64_t>(v.i);
  }
  return v.u;
}

int64_t GgufFile::get_int(std::string_view key) const {
  const GgufValue& v = require(*this, key);
  if (!is_integer(v.type)) type_mismatch(key, v.type, "an integer");
  if (is_signed(v.type)) return v.i;
  if (v.u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    throw Error(ErrorCode::invalid_file, "metadata key '" + std::string(key) + "' = " + std::to_string(v.u) +
                                             " does not fit a signed 64-bit integer");
  }
  return static_cast<int64_t>(v.u);
}

double GgufFile::get_float(std::string_view key) const {
  const GgufValue& v = require(*this, key);
  if (v.type == GgufValueType::f32 || v.type == GgufValueType::f64) return v.f;
  if (is_integer(v.type)) return is_signed(v.type) ? static_cast<double>(v.i) : static_cast<double>(v.u);
  type_mismatch(key, v.type, "a number");
}

bool GgufFile::get_bool(std::string_view key) const {
  const GgufValue& v = require(*this, key);
  if (v.type != GgufValueType::boolean) type_mismatch(key, v.type, "bool");
  return v.u != 0;
}

const std::string& GgufFile::get_string(std::string_view key) const {
  const GgufValue& v = require(*this, key);
  if (v.type != GgufValueType::string) type_mismatch(key, v.type, "string");
  return v.s;
}

const std::vector<std::string>& GgufFile::get_string_array(std::string_view key) const {
  const GgufValue& v = require(*this, key);
  if (v.type != GgufValueType::array || v.elem_type != GgufValueType::string) {
    type_mismatch(key, v.type == GgufValueType::array ? v.elem_type : v.type, "array of string");
  }
  return v.strings;
}

namespace {

template <class T>
T load_elem(const std::vector<std::byte>& raw, size_t i) {
  T x;
  std::memcpy(&x, raw.data() + i * sizeof(T), sizeof(T));
  return x;
}

double array_number(const GgufValue& v, size_t i) {
  switch (v.elem_type) {
    case GgufValueType::u8: return load_elem<uint8_t>(v.raw, i);
    case GgufValueType::i8: return load_elem<int8_t>(v.raw, i);
    case GgufValueType::u16: return load_elem<uint16_t>(v.raw, i);
    case GgufValueType::i16: return load_elem<int16_t>(v.raw, i);
    case GgufValueType::u32: return load_elem<uint32_t>(v.raw, i);
    case GgufValueType::i32: return load_elem<int32_t>(v.raw, i);
    case GgufValueType::u64: return static_cast<double>(load_elem<uint64_t>(v.raw, i));
    case GgufValueType::i64: return static_cast<double>(load_elem<int64_t>(v.raw, i));
    case GgufValueType::f32: return load_elem<float>(v.raw, i);
    case GgufValueType::f64: return load_elem<double>(v.raw, i);
    case GgufValueType::boolean: return load_elem<uint8_t>(v.raw, i);
    default: return 0;
  }
}

}  // namespace

std::vector<float> GgufFile::get_float_array(std::string_view key) const {
  const GgufValue& v = require(*this, key);
  if (v.type != GgufValueType::array || v.elem_type == GgufValueType::string ||
      v.elem_type == GgufValueType::boolean) {
    type_mismatch(key, v.type == GgufValueType::array ? v.elem_type : v.type, "array of numbers");
  }
  std::vector<float> out(static_cast<size_t>(v.count));
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(array_number(v, i));
  return out;
}

std::vector<int64_t> GgufFile::get_int_array(std::string_view key) const {
  const GgufValue& v = require(*this, key);
  if (v.type != GgufValueType::array || !is_integer(v.elem_type)) {
    type_mismatch(key, v.type == GgufValueType::array ? v.elem_type : v.type, "array of integers");
  }
  std::vector<int64_t> out(static_cast<size_t>(v.count));
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = v.elem_type == GgufValueType::u64 ? static_cast<int64_t>(load_elem<uint64_t>(v.raw, i))
             : v.elem_type == GgufValueType::i64 ? load_elem<int64_t>(v.raw, i)
                                                 : static_cast<int64_t>(array_number(v, i));
  }
  return out;
}

uint64_t GgufFile::get_uint_or(std::string_view key, uint64_t fallback) const {
  return has(key) ? get_uint(key) : fallback;
}
double GgufFile::get_float_or(std::string_view key, double fallback) const {
  return has(key) ? get_float(key) : fallback;
}
bool GgufFile::get_bool_or(std::string_view key, bool fallback) const {
  return has(key) ? get_bool(key) : fallback;
}
std::string GgufFile::get_string_or(std::string_view key, std::string_view fallback) const {
  return has(key) ? get_string(key) : std::string(fallback);
}

std::string GgufFile::architecture() const { return get_string_or("general.architecture", ""); }

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

void GgufFile::check_block_count(uint64_t block_count) const {
  if (block_count > tensors_.size())
    throw Error(ErrorCode::invalid_file, "block_count " + std::to_string(block_count) + " is more than the " +
                                             std::to_string(tensors_.size()) + " tensors of '" + path_ +
                                             "' can describe");
}

const GgufTensorInfo& GgufFile::tensor(std::string_view name) const {
  const GgufTensorInfo* t = find_tensor(name);
  if (!t) throw Error(ErrorCode::invalid_file, "'" + path_ + "': missing tensor '" + std::string(name) + "'");
  return *t;
}

}  // namespace sluice::core
