// Checking and merging the parts of a split model (llama.cpp's gguf-split layout; see core/gguf/gguf.h).
//
// gguf-split writes split.no (u16, 0-based), split.count (u16) and split.tensors.count (i32) into
// every part; part 1 also holds all the model's other keys, later parts only those three. Each
// check below names the part it found wrong, so a user knows which download to fetch again.
#include <unordered_map>

#include "common/error.h"
#include "core/gguf/gguf.h"
#include "io/split_set.h"

namespace sluice::core {

namespace {

std::string part_label(size_t i, size_t n, const std::string& path) {
  return "part " + std::to_string(i + 1) + " of " + std::to_string(n) + " '" + path + "'";
}

// A split key as an unsigned integer; a missing or mistyped key names the part.
uint64_t split_key(const GgufFile& part, const std::string& label, const char* key) {
  if (!part.has(key)) {
    throw Error(ErrorCode::invalid_file,
                label + " has no " + key + " key: it is not a part of a split model (gguf-split writes it in every part)");
  }
  try {
    return part.get_uint(key);
  } catch (const Error& e) {
    throw Error(ErrorCode::invalid_file, label + ": " + e.what());
  }
}

}  // namespace

void GgufFile::check_not_a_lone_part() const {
  const GgufValue* count = find("split.count");
  if (!count || count->type == GgufValueType::string || count->type == GgufValueType::array) return;
  uint64_t n = 0;
  try {
    n = get_uint("split.count");
  } catch (const Error&) {
    return;  // a negative count is no claim to be a part
  }
  if (n <= 1) return;  // gguf-split --merge leaves split.count = 0
  const uint64_t no = has("split.no") ? get_uint_or("split.no", 0) : 0;
  throw Error(ErrorCode::invalid_file,
              "'" + path_ + "' is part " + std::to_string(no + 1) + " of a model split into " + std::to_string(n) +
                  " files (split.count = " + std::to_string(n) + "), but its name does not end in -" +
                  io::split_part_path("", static_cast<uint32_t>(no + 1), static_cast<uint32_t>(n)).substr(1) +
                  ", so its other parts cannot be found: keep the names gguf-split gave the parts");
}

GgufFile GgufFile::merge_split(std::vector<GgufFile> parts, const std::vector<io::FilePart>& files) {
  const size_t n = parts.size();
  GgufFile& first = parts[0];
  const std::string first_label = part_label(0, n, files[0].path);
  const uint64_t total = split_key(first, first_label, "split.tensors.count");
  const std::string arch = first.architecture();

  for (size_t i = 0; i < n; ++i) {
    const GgufFile& p = parts[i];
    const std::string label = part_label(i, n, files[i].path);
    const uint64_t count = split_key(p, label, "split.count");
    if (count != n) {
      throw Error(ErrorCode::invalid_file, label + " has split.count = " + std::to_string(count) + ", but the set has " +
                                               std::to_string(n) + " parts (wrong count)");
    }
    const uint64_t tensors = split_key(p, label, "split.tensors.count");
    if (tensors != total) {
      throw Error(ErrorCode::invalid_file, label + " is a part of another model: split.tensors.count = " +
                                               std::to_string(tensors) + ", part 1 says " + std::to_string(total));
    }
    if (i > 0 && p.has("general.architecture") && p.architecture() != arch) {
      throw Error(ErrorCode::invalid_file, label + " is a part of another model: architecture '" + p.architecture() +
                                               "', part 1 is '" + arch + "'");
    }
    const uint64_t no = split_key(p, label, "split.no");
    if (no != i) {
      throw Error(ErrorCode::invalid_file,
                  label + " has split.no = " + std::to_string(no) +
                      (no < n ? ": it is a copy of part " + std::to_string(no + 1) + ", not part " + std::to_string(i + 1) +
                                    " (a duplicate part)"
                              : ", out of range for " + std::to_string(n) + " parts"));
    }
  }

  GgufFile merged;
  merged.version_ = first.version_;
  merged.data_offset_ = first.data_offset_;
  merged.alignment_ = first.alignment_;
  merged.kvs_ = std::move(first.kvs_);
  merged.kv_index_ = std::move(first.kv_index_);
  std::unordered_map<std::string, size_t> part_of;  // tensor name -> part, for duplicate messages
  for (size_t i = 0; i < n; ++i) {
    GgufPart info = parts[i].parts_.at(0);
    info.base = files[i].base;
    merged.file_size_ += info.bytes;
    merged.parts_.push_back(info);
    for (GgufTensorInfo& t : parts[i].tensors_) {
      auto [it, fresh] = part_of.emplace(t.name, i);
      if (!fresh) {
        throw Error(ErrorCode::invalid_file, part_label(i, n, files[i].path) + " holds tensor '" + t.name +
                                                 "', which " + part_label(it->second, n, files[it->second].path) +
                                                 " holds too (a part of another model)");
      }
      t.file_offset += files[i].base;
      t.part = static_cast<uint32_t>(i);
      merged.tensor_index_.emplace(t.name, merged.tensors_.size());
      merged.tensors_.push_back(std::move(t));
    }
  }
  if (merged.tensors_.size() != total) {
    throw Error(ErrorCode::invalid_file, "the " + std::to_string(n) + " parts of split model '" + files[0].path +
                                             "' hold " + std::to_string(merged.tensors_.size()) +
                                             " tensors, but split.tensors.count = " + std::to_string(total));
  }
  return merged;
}

}  // namespace sluice::core
