#include "io/split_set.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "common/error.h"

namespace sluice::io {

namespace {

constexpr size_t kDigits = 5;
constexpr std::string_view kSuffix = ".gguf";

bool all_digits(std::string_view s) {
  return s.size() == kDigits && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

std::optional<SplitName> parse_split_name(const std::string& path) {
  // "-NNNNN-of-MMMMM.gguf" is 1 + 5 + 4 + 5 + 5 = 20 bytes.
  constexpr size_t kTail = 1 + kDigits + 4 + kDigits + 5;
  if (path.size() <= kTail) return std::nullopt;
  const std::string_view tail = std::string_view(path).substr(path.size() - kTail);
  if (tail[0] != '-' || tail.substr(1 + kDigits, 4) != "-of-" || tail.substr(kTail - 5) != kSuffix) return std::nullopt;
  const std::string_view no = tail.substr(1, kDigits), count = tail.substr(1 + kDigits + 4, kDigits);
  if (!all_digits(no) || !all_digits(count)) return std::nullopt;
  SplitName n;
  n.prefix = path.substr(0, path.size() - kTail);
  n.no = static_cast<uint32_t>(std::stoul(std::string(no)));
  n.count = static_cast<uint32_t>(std::stoul(std::string(count)));
  const size_t slash = n.prefix.rfind('/');
  if (n.no < 1 || n.no > n.count || n.prefix.size() == (slash == std::string::npos ? 0 : slash + 1)) return std::nullopt;
  return n;
}

std::string split_part_path(const std::string& prefix, uint32_t no, uint32_t count) {
  char tail[40];
  std::snprintf(tail, sizeof tail, "-%05u-of-%05u.gguf", no, count);
  return prefix + tail;
}

std::vector<std::string> split_set_paths(const std::string& path) {
  const auto name = parse_split_name(path);
  if (!name || name->count < 2) return {path};
  std::vector<std::string> paths;
  for (uint32_t i = 1; i <= name->count; ++i) {
    std::string p = split_part_path(name->prefix, i, name->count);
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0) {
      throw Error(ErrorCode::invalid_file, "part " + std::to_string(i) + " of " + std::to_string(name->count) +
                                               " of split model '" + path + "' is missing: '" + p + "': " +
                                               std::strerror(errno));
    }
    paths.push_back(std::move(p));
  }
  return paths;
}

std::string split_first_part(const std::string& path) {
  const auto name = parse_split_name(path);
  if (!name || name->count < 2) return path;
  return split_part_path(name->prefix, 1, name->count);
}

PartMap::PartMap(const std::vector<std::string>& paths, const std::vector<uint64_t>& sizes) {
  uint64_t base = 0;
  for (size_t i = 0; i < paths.size(); ++i) {
    parts_.push_back(FilePart{paths[i], base, sizes[i]});
    end_ = base + sizes[i];
    base = (end_ + kPartBaseAlignment - 1) / kPartBaseAlignment * kPartBaseAlignment;
  }
}

PartMap::Run PartMap::run_at(uint64_t offset, uint64_t max_length) const {
  // The last part whose base is <= offset.
  auto it = std::upper_bound(parts_.begin(), parts_.end(), offset,
                             [](uint64_t o, const FilePart& p) { return o < p.base; });
  const size_t i = static_cast<size_t>(it - parts_.begin()) - 1;
  const FilePart& p = parts_[i];
  Run r;
  if (offset < p.base + p.bytes) {
    r.part = static_cast<int>(i);
    r.local = offset - p.base;
    r.length = std::min(max_length, p.bytes - r.local);
  } else {
    const uint64_t next = i + 1 < parts_.size() ? parts_[i + 1].base : end_;
    r.length = std::min(max_length, next - offset);
  }
  return r;
}

std::string PartMap::describe_read_failure(const std::string& path, uint64_t offset, uint64_t length,
                                           int64_t negative_errno) const {
  if (parts_.size() <= 1 || offset >= end_) return io::describe_read_failure(path, offset, length, negative_errno);
  const Run r = run_at(offset, length);
  std::string where = path;
  if (r.part >= 0) {
    where += "' (part " + std::to_string(r.part + 1) + " of " + std::to_string(parts_.size()) + " '" +
             parts_[static_cast<size_t>(r.part)].path + "', offset " + std::to_string(r.local) + ")";
  } else {
    where += "' (padding between parts)";
  }
  // describe_read_failure quotes the path; the part goes inside the same message.
  std::string text = io::describe_read_failure(path, offset, length, negative_errno);
  const std::string quoted = "'" + path + "'";
  const size_t at = text.find(quoted);
  if (at != std::string::npos) text.replace(at, quoted.size(), "'" + where);
  return text;
}

}  // namespace sluice::io
