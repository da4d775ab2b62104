#include "core/gguf/gguf_stream_writer.h"

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <filesystem>
#include <memory>
#include <mutex>
#include <thread>

#include "common/error.h"
#include "common/units.h"
#include "io/aligned_buffer.h"
#include "io/file_sink.h"

namespace sluice::core {
namespace {

constexpr uint32_t kTypeU8 = 0, kTypeI8 = 1, kTypeU16 = 2, kTypeI16 = 3, kTypeU32 = 4, kTypeI32 = 5,
                   kTypeF32 = 6, kTypeBool = 7, kTypeString = 8, kTypeArray = 9, kTypeU64 = 10,
                   kTypeI64 = 11, kTypeF64 = 12;
constexpr size_t kMaxName = 64;

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// The writer thread: takes filled buffers in order and writes them; reports the first failure.
class BufferPipe {
 public:
  BufferPipe(io::FileSink& sink, size_t chunk, size_t n) : sink_(sink) {
    for (size_t i = 0; i < n; ++i) {
      pool_.emplace_back(chunk);
      free_.push_back(pool_.back().data());
    }
    thread_ = std::thread([this] { run(); });
  }
  ~BufferPipe() { finish_noexcept(); }

  std::byte* acquire() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return !free_.empty() || failed_; });
    rethrow_locked();
    std::byte* b = free_.front();
    free_.pop_front();
    return b;
  }
  void submit(std::byte* b, size_t n) {
    std::lock_guard lock(mu_);
    full_.push_back({b, n});
    cv_.notify_all();
  }
  // Waits for every submitted buffer to be written; throws the writer's error if any.
  void finish() {
    finish_noexcept();
    std::lock_guard lock(mu_);
    rethrow_locked();
  }

 private:
  struct Job { std::byte* data; size_t n; };

  void run() {
    for (;;) {
      Job job;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return !full_.empty() || closing_; });
        if (full_.empty()) return;
        job = full_.front();
        full_.pop_front();
      }
      std::exception_ptr err;
      if (!failed_) {
        try {
          sink_.write(std::span<const std::byte>(job.data, job.n));
        } catch (...) {
          err = std::current_exception();
        }
      }
      std::lock_guard lock(mu_);
      if (err && !failed_) {
        failed_ = true;
        error_ = err;
      }
      free_.push_back(job.data);
      cv_.notify_all();
    }
  }
  void finish_noexcept() {
    {
      std::lock_guard lock(mu_);
      if (!thread_.joinable()) return;
      closing_ = true;
      cv_.notify_all();
    }
    thread_.join();
  }
  void rethrow_locked() {
    if (failed_) std::rethrow_exception(error_);
  }

  io::FileSink& sink_;
  std::vector<io::AlignedBuffer> pool_;
  std::deque<std::byte*> free_;
  std::deque<Job> full_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool closing_ = false;
  bool failed_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

// Fills ring buffers completely (so O_DIRECT writes stay aligned) and hands them to the pipe.
class Ring {
 public:
  Ring(BufferPipe& pipe, size_t chunk, uint64_t total, const GgufStreamWriter::Progress& progress)
      : pipe_(pipe), chunk_(chunk), total_(total), progress_(progress), buf_(pipe.acquire()) {}
  size_t room() const { return chunk_ - used_; }
  std::byte* cursor() { return buf_ + used_; }
  void advance(size_t n) {
    used_ += n;
    if (used_ == chunk_) submit();
  }
  void put(const std::byte* p, size_t n) {
    while (n > 0) {
      const size_t k = std::min(n, room());
      std::memcpy(cursor(), p, k);
      p += k;
      n -= k;
      advance(k);
    }
  }
  void zeros(uint64_t n) {
    while (n > 0) {
      const size_t k = static_cast<size_t>(std::min<uint64_t>(n, room()));
      std::memset(cursor(), 0, k);
      n -= k;
      advance(k);
    }
  }
  void finish() {
    if (used_ > 0) {
      pipe_.submit(buf_, used_);
      done_ += used_;
      used_ = 0;
    }
    pipe_.finish();
  }

 private:
  void submit() {
    pipe_.submit(buf_, used_);
    done_ += used_;
    used_ = 0;
    if (progress_) progress_(done_, total_);
    buf_ = pipe_.acquire();
  }
  BufferPipe& pipe_;
  size_t chunk_;
  uint64_t total_;
  const GgufStreamWriter::Progress& progress_;
  std::byte* buf_;
  size_t used_ = 0;
  uint64_t done_ = 0;
};

}  // namespace

GgufStreamWriter::GgufStreamWriter(uint32_t alignment) : alignment_(alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0)
    throw Error(ErrorCode::invalid_argument, "GGUF alignment " + std::to_string(alignment) + " is not a power of two");
  if (alignment != 32) add_u32("general.alignment", alignment);
}

void GgufStreamWriter::put_bytes(const void* p, size_t n) {
  const auto* b = static_cast<const std::byte*>(p);
  kv_bytes_.insert(kv_bytes_.end(), b, b + n);
}
void GgufStreamWriter::put_string(std::string_view s) {
  put<uint64_t>(s.size());
  put_bytes(s.data(), s.size());
}
void GgufStreamWriter::begin_kv(std::string_view key, uint32_t type) {
  if (has_key(key)) throw Error(ErrorCode::invalid_argument, "GGUF key '" + std::string(key) + "' added twice");
  keys_.emplace_back(key);
  key_starts_.push_back(kv_bytes_.size());
  put_string(key);
  put<uint32_t>(type);
  ++n_kv_;
}
void GgufStreamWriter::add_keys_of(const GgufStreamWriter& other) {
  for (size_t i = 0; i < other.keys_.size(); ++i) {
    if (other.keys_[i] == "general.alignment" && has_key("general.alignment")) continue;
    if (has_key(other.keys_[i]))
      throw Error(ErrorCode::invalid_argument, "GGUF key '" + other.keys_[i] + "' added twice");
    const size_t begin = other.key_starts_[i];
    const size_t end = i + 1 < other.keys_.size() ? other.key_starts_[i + 1] : other.kv_bytes_.size();
    keys_.push_back(other.keys_[i]);
    key_starts_.push_back(kv_bytes_.size());
    kv_bytes_.insert(kv_bytes_.end(), other.kv_bytes_.begin() + static_cast<ptrdiff_t>(begin),
                     other.kv_bytes_.begin() + static_cast<ptrdiff_t>(end));
    ++n_kv_;
  }
}

bool GgufStreamWriter::has_key(std::string_view key) const {
  return std::find(keys_.begin(), keys_.end(), key) != keys_.end();
}

void GgufStreamWriter::add_u8(std::string_view k, uint8_t v) { begin_kv(k, kTypeU8); put(v); }
void GgufStreamWriter::add_i8(std::string_view k, int8_t v) { begin_kv(k, kTypeI8); put(v); }
void GgufStreamWriter::add_u16(std::string_view k, uint16_t v) { begin_kv(k, kTypeU16); put(v); }
void GgufStreamWriter::add_i16(std::string_view k, int16_t v) { begin_kv(k, kTypeI16); put(v); }
void GgufStreamWriter::add_u32(std::string_view k, uint32_t v) { begin_kv(k, kTypeU32); put(v); }
void GgufStreamWriter::add_i32(std::string_view k, int32_t v) { begin_kv(k, kTypeI32); put(v); }
void GgufStreamWriter::add_u64(std::string_view k, uint64_t v) { begin_kv(k, kTypeU64); put(v); }
void GgufStreamWriter::add_i64(std::string_view k, int64_t v) { begin_kv(k, kTypeI64); put(v); }
void GgufStreamWriter::add_f32(std::string_view k, float v) { begin_kv(k, kTypeF32); put(v); }
void GgufStreamWriter::add_f64(std::string_view k, double v) { begin_kv(k, kTypeF64); put(v); }
void GgufStreamWriter::add_bool(std::string_view k, bool v) { begin_kv(k, kTypeBool); put<uint8_t>(v ? 1 : 0); }
void GgufStreamWriter::add_string(std::string_view k, std::string_view v) { begin_kv(k, kTypeString); put_string(v); }

void GgufStreamWriter::add_string_array(std::string_view k, std::span<const std::string> values) {
  begin_kv(k, kTypeArray);
  put<uint32_t>(kTypeString);
  put<uint64_t>(values.size());
  for (const std::string& s : values) put_string(s);
}
void GgufStreamWriter::add_f32_array(std::string_view k, std::span<const float> values) {
  add_raw_array(k, kTypeF32, values.size(), std::as_bytes(values));
}
void GgufStreamWriter::add_i32_array(std::string_view k, std::span<const int32_t> values) {
  add_raw_array(k, kTypeI32, values.size(), std::as_bytes(values));
}
void GgufStreamWriter::add_u32_array(std::string_view k, std::span<const uint32_t> values) {
  add_raw_array(k, kTypeU32, values.size(), std::as_bytes(values));
}
void GgufStreamWriter::add_raw_array(std::string_view k, uint32_t elem_type, uint64_t count,
                                     std::span<const std::byte> raw) {
  if (elem_type == kTypeString || elem_type == kTypeArray)
    throw Error(ErrorCode::invalid_argument, "GGUF key '" + std::string(k) + "': raw arrays hold numbers only");
  begin_kv(k, kTypeArray);
  put<uint32_t>(elem_type);
  put<uint64_t>(count);
  put_bytes(raw.data(), raw.size());
}

const StreamTensor& GgufStreamWriter::add_tensor(std::string_view name, GgmlType type,
                                                 std::initializer_list<int64_t> ne) {
  return add_tensor(name, type, std::span<const int64_t>(ne.begin(), ne.size()));
}

const StreamTensor& GgufStreamWriter::add_tensor(std::string_view name, GgmlType type, std::span<const int64_t> ne) {
  const std::string n(name);
  if (n.empty() || n.size() >= kMaxName)
    throw Error(ErrorCode::invalid_argument, "tensor name '" + n + "' must be 1 to 63 bytes");
  for (const StreamTensor& t : tensors_)
    if (t.name == n) throw Error(ErrorCode::invalid_argument, "tensor '" + n + "' added twice");
  if (ne.empty() || ne.size() > 4)
    throw Error(ErrorCode::invalid_argument, "tensor '" + n + "' has " + std::to_string(ne.size()) + " dims (1 to 4)");
  StreamTensor t;
  t.name = n;
  t.type = type;
  t.n_dims = static_cast<uint32_t>(ne.size());
  uint64_t n_el = 1;
  for (size_t i = 0; i < ne.size(); ++i) {
    if (ne[i] < 1)
      throw Error(ErrorCode::invalid_argument, "tensor '" + n + "' ne[" + std::to_string(i) + "] = " + std::to_string(ne[i]));
    t.ne[i] = ne[i];
    n_el = checked_mul(n_el, static_cast<uint64_t>(ne[i]), "tensor size");
  }
  const GgmlTypeTraits& tr = ggml_traits(type);
  if (t.ne[0] % tr.block_size != 0)
    throw Error(ErrorCode::invalid_argument, "tensor '" + n + "': ne[0] = " + std::to_string(t.ne[0]) +
                " is not a multiple of the " + std::string(tr.name) + " block size " + std::to_string(tr.block_size));
  t.row_bytes = ggml_row_bytes(type, t.ne[0]);
  t.n_bytes = checked_mul(t.row_bytes, n_el / t.ne[0], "tensor size");
  t.offset = align_up(data_size_, alignment_);
  t.index = tensors_.size();
  data_size_ = checked_add(t.offset, t.n_bytes, "data size");
  tensors_.push_back(std::move(t));
  return tensors_.back();
}

uint64_t GgufStreamWriter::header_bytes() const {
  uint64_t n = 4 + 4 + 8 + 8 + kv_bytes_.size();
  for (const StreamTensor& t : tensors_) n += 8 + t.name.size() + 4 + 8ull * t.n_dims + 4 + 8;
  return align_up(n, alignment_);
}

void GgufStreamWriter::write(const std::string& path, const Fill& fill, const Progress& progress,
                             size_t chunk_bytes, size_t n_buffers) const {
  if (chunk_bytes < 4096 || n_buffers < 2)
    throw Error(ErrorCode::invalid_argument, "GGUF stream ring too small: " + std::to_string(n_buffers) + " x " +
                std::to_string(chunk_bytes) + " bytes");
  // Header bytes, built once.
  std::vector<std::byte> head;
  auto put = [&](const void* p, size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    head.insert(head.end(), b, b + n);
  };
  const uint32_t version = 3;
  const uint64_t n_tensors = tensors_.size();
  put("GGUF", 4);
  put(&version, 4);
  put(&n_tensors, 8);
  put(&n_kv_, 8);
  put(kv_bytes_.data(), kv_bytes_.size());
  for (const StreamTensor& t : tensors_) {
    const uint64_t len = t.name.size();
    put(&len, 8);
    put(t.name.data(), len);
    put(&t.n_dims, 4);
    for (uint32_t i = 0; i < t.n_dims; ++i) put(&t.ne[i], 8);
    const uint32_t type = static_cast<uint32_t>(t.type);
    put(&type, 4);
    put(&t.offset, 8);
  }
  head.resize(header_bytes(), std::byte{0});

  const uint64_t total = file_bytes();
  const size_t chunk = (chunk_bytes + io::FileSink::kDirectAlign - 1) / io::FileSink::kDirectAlign *
                       io::FileSink::kDirectAlign;
  try {
    io::FileSink sink(path, true);
    {
      BufferPipe pipe(sink, chunk, n_buffers);
      Ring ring(pipe, chunk, total, progress);
      ring.put(head.data(), head.size());
      std::vector<std::byte> scratch;
      uint64_t pos = 0;  // data-section position of the next byte
      for (const StreamTensor& t : tensors_) {
        ring.zeros(t.offset - pos);
        pos = t.offset;
        const uint64_t granule = t.row_bytes <= chunk ? t.row_bytes : ggml_traits(t.type).type_size;
        uint64_t off = 0;
        while (off < t.n_bytes) {
          const uint64_t fit = ring.room() / granule * granule;
          if (fit > 0) {  // straight into the ring
            const size_t n = static_cast<size_t>(std::min<uint64_t>(fit, t.n_bytes - off));
            fill(t, off, std::span<std::byte>(ring.cursor(), n));
            ring.advance(n);
            off += n;
          } else {  // one granule straddles two buffers: produce it aside, then copy
            const size_t n = static_cast<size_t>(std::min<uint64_t>(granule, t.n_bytes - off));
            scratch.resize(n);
            fill(t, off, std::span<std::byte>(scratch.data(), n));
            ring.put(scratch.data(), n);
            off += n;
          }
        }
        pos += t.n_bytes;
      }
      ring.finish();
    }
    sink.close();
  } catch (...) {
    std::error_code ec;
    std::filesystem::remove(path, ec);
    throw;
  }
  if (progress) progress(total, total);
}

}  // namespace sluice::core
