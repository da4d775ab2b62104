#include "core/gguf/gguf_split_writer.h"

#include <filesystem>

#include "common/error.h"
#include "io/split_set.h"

namespace sluice::core {

namespace {

constexpr uint64_t kSplitPadding = 32;  // gguf-split pads each tensor to GGUF_DEFAULT_ALIGNMENT
constexpr size_t kMaxParts = 99999;     // five digits in the names

uint64_t pad(uint64_t v) { return (v + kSplitPadding - 1) / kSplitPadding * kSplitPadding; }

}  // namespace

std::vector<std::vector<size_t>> plan_split(const std::vector<StreamTensor>& tensors, uint64_t max_part_bytes) {
  std::vector<std::vector<size_t>> parts(1);
  uint64_t current = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const uint64_t n = pad(tensors[i].n_bytes);
    if (!parts.back().empty() && current + n > max_part_bytes) {
      parts.emplace_back();
      current = 0;
    }
    current += n;
    parts.back().push_back(i);
  }
  return parts;
}

std::string split_prefix(const std::string& out_path) {
  const std::string ext = ".gguf";
  if (out_path.size() > ext.size() && out_path.compare(out_path.size() - ext.size(), ext.size(), ext) == 0)
    return out_path.substr(0, out_path.size() - ext.size());
  return out_path;
}

std::vector<std::string> write_split(const GgufStreamWriter& model, const std::string& prefix,
                                     uint64_t max_part_bytes, const GgufStreamWriter::Fill& fill,
                                     const GgufStreamWriter::Progress& progress) {
  const std::vector<std::vector<size_t>> plan = plan_split(model.tensors(), max_part_bytes);
  if (plan.size() > kMaxParts) {
    throw Error(ErrorCode::invalid_argument, "--split-max-size " + std::to_string(max_part_bytes) + " bytes needs " +
                                                 std::to_string(plan.size()) + " parts, more than gguf-split's 99999");
  }
  const auto n = static_cast<uint16_t>(plan.size());
  // Declare every part first, so progress can count the bytes of all of them.
  std::vector<GgufStreamWriter> writers;
  writers.reserve(plan.size());
  uint64_t total = 0;
  for (size_t p = 0; p < plan.size(); ++p) {
    GgufStreamWriter& w = writers.emplace_back(model.alignment());
    if (p == 0) w.add_keys_of(model);
    w.add_u16("split.no", static_cast<uint16_t>(p));
    w.add_i32("split.tensors.count", static_cast<int32_t>(model.tensors().size()));
    w.add_u16("split.count", n);
    for (size_t i : plan[p]) {
      const StreamTensor& t = model.tensors()[i];
      w.add_tensor(t.name, t.type, std::span<const int64_t>(t.ne.data(), t.n_dims));
    }
    total += w.file_bytes();
  }
  std::vector<std::string> paths;
  uint64_t done = 0;
  try {
    for (size_t p = 0; p < plan.size(); ++p) {
      const std::string path = io::split_part_path(prefix, static_cast<uint32_t>(p + 1), n);
      paths.push_back(path);
      const std::vector<size_t>& ids = plan[p];
      auto part_fill = [&](const StreamTensor& t, uint64_t offset, std::span<std::byte> dst) {
        fill(model.tensors()[ids[t.index]], offset, dst);
      };
      auto part_progress = [&](uint64_t d, uint64_t) {
        if (progress) progress(done + d, total);
      };
      writers[p].write(path, part_fill, part_progress);
      done += writers[p].file_bytes();
    }
  } catch (...) {
    std::error_code ec;
    for (const std::string& path : paths) std::filesystem::remove(path, ec);
    throw;
  }
  return paths;
}

uint64_t parse_split_size(const std::string& text, const std::string& what) {
  auto bad = [&]() {
    return Error(ErrorCode::invalid_argument, what + ": expected a size such as 2G or 500M (decimal, as gguf-split), got '" +
                                                  text + "'");
  };
  if (text.empty()) throw bad();
  uint64_t unit = 1;
  std::string digits = text;
  switch (text.back()) {
    case 'K': case 'k': unit = 1000; break;
    case 'M': case 'm': unit = 1000 * 1000; break;
    case 'G': case 'g': unit = 1000 * 1000 * 1000; break;
    default: break;
  }
  if (unit != 1) digits.pop_back();
  if (digits.empty() || digits.size() > 12 || digits.find_first_not_of("0123456789") != std::string::npos) throw bad();
  const uint64_t v = std::stoull(digits) * unit;
  if (v == 0) throw bad();
  return v;
}

}  // namespace sluice::core
