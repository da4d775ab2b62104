#include "core/gguf/gguf_writer.h"

#include <algorithm>
#include <cstring>
#include <fstream>

#include "common/error.h"

namespace sluice::core {

namespace {

class Out {
 public:
  std::vector<std::byte> buf;
  template <class T>
  void put(T v) {
    const size_t n = buf.size();
    buf.resize(n + sizeof(T));
    std::memcpy(buf.data() + n, &v, sizeof(T));
  }
  void put_bytes(const void* p, size_t n) {
    const size_t at = buf.size();
    buf.resize(at + n);
    if (n) std::memcpy(buf.data() + at, p, n);
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    put_bytes(s.data(), s.size());
  }
  void pad(uint64_t align) {
    while (buf.size() % align) buf.push_back(std::byte{0});
  }
};

size_t scalar_size(GgufValueType t) {
  switch (t) {
    case GgufValueType::u8: case GgufValueType::i8: case GgufValueType::boolean: return 1;
    case GgufValueType::u16: case GgufValueType::i16: return 2;
    case GgufValueType::u32: case GgufValueType::i32: case GgufValueType::f32: return 4;
    default: return 8;
  }
}

void put_scalar(Out& o, const GgufValue& v) {
  switch (v.type) {
    case GgufValueType::u8: o.put<uint8_t>(static_cast<uint8_t>(v.u)); break;
    case GgufValueType::i8: o.put<int8_t>(static_cast<int8_t>(v.i)); break;
    case GgufValueType::u16: o.put<uint16_t>(static_cast<uint16_t>(v.u)); break;
    case GgufValueType::i16: o.put<int16_t>(static_cast<int16_t>(v.i)); break;
    case GgufValueType::u32: o.put<uint32_t>(static_cast<uint32_t>(v.u)); break;
    case GgufValueType::i32: o.put<int32_t>(static_cast<int32_t>(v.i)); break;
    case GgufValueType::u64: o.put<uint64_t>(v.u); break;
    case GgufValueType::i64: o.put<int64_t>(v.i); break;
    case GgufValueType::f32: o.put<float>(static_cast<float>(v.f)); break;
    case GgufValueType::f64: o.put<double>(v.f); break;
    case GgufValueType::boolean: o.put<uint8_t>(v.u ? 1 : 0); break;
    default: break;
  }
}

void put_value(Out& o, const std::string& key, const GgufValue& v) {
  o.put<uint32_t>(static_cast<uint32_t>(v.type));
  if (v.type == GgufValueType::string) {
    o.put_string(v.s);
  } else if (v.type == GgufValueType::array) {
    o.put<uint32_t>(static_cast<uint32_t>(v.elem_type));
    o.put<uint64_t>(v.count);
    if (v.elem_type == GgufValueType::array)
      throw Error(ErrorCode::unsupported, "metadata key '" + key + "': arrays of arrays are not supported");
    if (v.elem_type == GgufValueType::string) {
      if (v.strings.size() != v.count)
        throw Error(ErrorCode::invalid_argument, "metadata key '" + key + "': count does not match the strings");
      for (const std::string& s : v.strings) o.put_string(s);
    } else {
      if (v.raw.size() != v.count * scalar_size(v.elem_type))
        throw Error(ErrorCode::invalid_argument, "metadata key '" + key + "': count does not match the raw bytes");
      o.put_bytes(v.raw.data(), v.raw.size());
    }
  } else {
    put_scalar(o, v);
  }
}

}  // namespace

void GgufWriter::set(const std::string& key, GgufValue value) {
  for (auto& kv : kvs_)
    if (kv.first == key) {
      kv.second = std::move(value);
      return;
    }
  kvs_.emplace_back(key, std::move(value));
}

void GgufWriter::set_u32(const std::string& key, uint32_t v) {
  GgufValue x;
  x.type = GgufValueType::u32;
  x.u = v;
  set(key, std::move(x));
}

void GgufWriter::set_f32(const std::string& key, float v) {
  GgufValue x;
  x.type = GgufValueType::f32;
  x.f = v;
  set(key, std::move(x));
}

void GgufWriter::set_bool(const std::string& key, bool v) {
  GgufValue x;
  x.type = GgufValueType::boolean;
  x.u = v ? 1 : 0;
  set(key, std::move(x));
}

void GgufWriter::set_string(const std::string& key, const std::string& v) {
  GgufValue x;
  x.type = GgufValueType::string;
  x.s = v;
  set(key, std::move(x));
}

void GgufWriter::remove(const std::string& key) {
  std::erase_if(kvs_, [&](const auto& kv) { return kv.first == key; });
}

void GgufWriter::copy_metadata(const GgufFile& file) {
  for (const GgufKv& kv : file.metadata()) set(kv.key, kv.value);
}

void GgufWriter::add_tensor(const std::string& name, GgmlType type, std::vector<int64_t> ne,
                            std::vector<std::byte> data) {
  if (has_tensor(name)) throw Error(ErrorCode::invalid_argument, "tensor '" + name + "' added twice");
  if (ne.empty() || ne.size() > 4) throw Error(ErrorCode::invalid_argument, "tensor '" + name + "' needs 1 to 4 dims");
  uint64_t rows = 1;
  for (size_t i = 1; i < ne.size(); ++i) rows *= static_cast<uint64_t>(ne[i]);
  const uint64_t want = ggml_row_bytes(type, static_cast<uint64_t>(ne[0])) * rows;
  if (data.size() != want)
    throw Error(ErrorCode::invalid_argument, "tensor '" + name + "' has " + std::to_string(data.size()) +
                                                 " bytes, its shape needs " + std::to_string(want));
  tensors_.push_back({name, type, std::move(ne), std::move(data)});
}

void GgufWriter::remove_tensor(const std::string& name) {
  std::erase_if(tensors_, [&](const TensorEntry& t) { return t.name == name; });
}

bool GgufWriter::has_tensor(const std::string& name) const {
  return std::any_of(tensors_.begin(), tensors_.end(), [&](const TensorEntry& t) { return t.name == name; });
}

std::vector<std::byte> GgufWriter::bytes() const {
  uint64_t align = 32;
  for (const auto& kv : kvs_)
    if (kv.first == "general.alignment" && kv.second.u > 0) align = kv.second.u;
  Out o;
  o.put<uint32_t>(0x46554747);
  o.put<uint32_t>(3);
  o.put<uint64_t>(tensors_.size());
  o.put<uint64_t>(kvs_.size());
  for (const auto& [key, value] : kvs_) {
    o.put_string(key);
    put_value(o, key, value);
  }
  uint64_t offset = 0;
  for (const TensorEntry& t : tensors_) {
    o.put_string(t.name);
    o.put<uint32_t>(static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) o.put<int64_t>(d);
    o.put<uint32_t>(static_cast<uint32_t>(t.type));
    o.put<uint64_t>(offset);
    offset += (t.data.size() + align - 1) / align * align;
  }
  o.pad(align);
  for (const TensorEntry& t : tensors_) {
    o.put_bytes(t.data.data(), t.data.size());
    o.pad(align);
  }
  return std::move(o.buf);
}

void GgufWriter::write(const std::string& path) const {
  const std::vector<std::byte> b = bytes();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  if (!out) throw Error(ErrorCode::io_error, "cannot write GGUF file '" + path + "'");
}

std::vector<std::byte> read_tensor_bytes(io::Reader& reader, const GgufTensorInfo& info) {
  std::vector<std::byte> data(info.n_bytes);
  reader.read_sync(info.file_offset, data);
  return data;
}

void copy_gguf(io::Reader& reader, const GgufFile& file, GgufWriter& writer) {
  writer.copy_metadata(file);
  for (const GgufTensorInfo& t : file.tensors())
    writer.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne.begin(), t.ne.begin() + t.n_dims),
                      read_tensor_bytes(reader, t));
}

}  // namespace sluice::core
