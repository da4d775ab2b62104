// GgufBytes: writes GGUF files byte by byte for the reader's tests, including files that are
// wrong on purpose (bad counts, lengths, types, offsets). Not a model writer: see core/gguf/gguf_writer.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace sluice::test {

struct GgufBytes {
  std::vector<uint8_t> b;

  GgufBytes& u8(uint8_t v) { b.push_back(v); return *this; }
  GgufBytes& u32(uint32_t v) { return raw(&v, 4); }
  GgufBytes& i32(int32_t v) { return raw(&v, 4); }
  GgufBytes& u64(uint64_t v) { return raw(&v, 8); }
  GgufBytes& i64(int64_t v) { return raw(&v, 8); }
  GgufBytes& f32(float v) { return raw(&v, 4); }
  GgufBytes& raw(const void* p, size_t n) {
    const uint8_t* c = static_cast<const uint8_t*>(p);
    b.insert(b.end(), c, c + n);
    return *this;
  }
  GgufBytes& str(const std::string& s) { u64(s.size()); return raw(s.data(), s.size()); }
  GgufBytes& header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    raw("GGUF", 4);
    u32(version);
    u64(n_tensors);
    return u64(n_kv);
  }
  GgufBytes& kv_u32(const std::string& key, uint32_t v) { str(key); u32(4); return u32(v); }
  GgufBytes& kv_str(const std::string& key, const std::string& v) { str(key); u32(8); return str(v); }
  GgufBytes& tensor(const std::string& name, std::vector<int64_t> ne, uint32_t type, uint64_t offset) {
    str(name);
    u32(static_cast<uint32_t>(ne.size()));
    for (int64_t d : ne) i64(d);
    u32(type);
    return u64(offset);
  }
  GgufBytes& pad_to(size_t alignment) {
    while (b.size() % alignment) b.push_back(0);
    return *this;
  }
  GgufBytes& zeros(size_t n) { b.insert(b.end(), n, 0); return *this; }
  size_t size() const { return b.size(); }
};

}  // namespace sluice::test
