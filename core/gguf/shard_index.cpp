#include "core/gguf/shard_index.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <xxhash.h>

#include "common/error.h"
#include "core/gguf/model_summary.h"
#include "io/split_set.h"

namespace sluice::core {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "sluice-index-1";
constexpr uint64_t kReadChunk = 16ull << 20;  // bytes per read while indexing

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

uint64_t parse_hex64(const std::string& s) {
  if (s.size() != 16) throw Error(ErrorCode::invalid_file, "bad digest '" + s + "' in shard index");
  return std::stoull(s, nullptr, 16);
}

}  // namespace

uint64_t xxh3_64(std::span<const std::byte> bytes) { return XXH3_64bits(bytes.data(), bytes.size()); }

ModelFingerprint ShardIndex::fingerprint(const fs::path& model_path, const GgufFile& file, io::Reader& reader) {
  // A split model is fingerprinted over all its parts: sizes add up, the newest mtime counts and
  // every part's header is digested, so replacing or touching any part makes the index stale.
  std::vector<std::pair<fs::path, GgufPart>> files;
  if (file.is_split()) {
    for (const GgufPart& p : file.parts()) files.emplace_back(p.path, p);
  } else {
    files.emplace_back(model_path, GgufPart{model_path.string(), 0, file.data_offset(), 0, 0});
  }
  ModelFingerprint fp;
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  std::vector<std::byte> header;
  for (const auto& [path, part] : files) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      XXH3_freeState(state);
      throw Error(ErrorCode::io_error, "cannot stat '" + path.string() + "'");
    }
    fp.file_size += static_cast<uint64_t>(st.st_size);
    fp.mtime_ns = std::max<int64_t>(fp.mtime_ns, static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec);
    const uint64_t end = file.is_split() ? part.base + std::min(part.data_offset, part.bytes) : reader.file_size();
    header.resize(static_cast<size_t>(std::min(part.base + part.data_offset, end) - part.base));
    reader.read_sync(part.base, header);
    XXH3_64bits_update(state, header.data(), header.size());
  }
  fp.header_digest = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return fp;
}

ShardIndex ShardIndex::build(const GgufFile& file, io::Reader& reader, const Progress& progress) {
  ShardIndex index;
  uint64_t total = 0;
  for (const GgufTensorInfo& t : file.tensors()) total += t.n_bytes;

  std::vector<std::byte> buffer;
  uint64_t done = 0;
  for (const GgufTensorInfo& t : file.tensors()) {
    IndexedTensor it;
    it.name = t.name;
    it.file_offset = t.file_offset;
    it.bytes = t.n_bytes;
    if (classify_tensor(t.name) == TensorClass::routed_experts && t.n_dims >= 3) {
      it.n_parts = static_cast<uint32_t>(t.ne[2]);
    }
    const uint64_t part = it.part_bytes();
    for (uint32_t p = 0; p < it.n_parts; ++p) {
      // Stream the extent through a bounded buffer.
      XXH3_state_t* state = XXH3_createState();
      XXH3_64bits_reset(state);
      uint64_t off = 0;
      while (off < part) {
        uint64_t n = std::min(kReadChunk, part - off);
        buffer.resize(static_cast<size_t>(n));
        reader.read_sync(it.file_offset + p * part + off, buffer);
        XXH3_64bits_update(state, buffer.data(), buffer.size());
        off += n;
        done += n;
        if (progress) progress(done, total);
      }
      it.digests.push_back(XXH3_64bits_digest(state));
      XXH3_freeState(state);
    }
    index.by_name_.emplace(it.name, index.tensors_.size());
    index.tensors_.push_back(std::move(it));
  }
  index.model_ = fingerprint(reader.path(), file, reader);
  return index;
}

fs::path ShardIndex::sidecar_path(const fs::path& model_path) {
  // A split model has one sidecar, next to part 1, whichever part's path named it.
  return fs::path(io::split_first_part(model_path.string()) + ".sluice-index");
}

fs::path ShardIndex::cache_path(const fs::path& model_path) {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  fs::path base = xdg && *xdg ? fs::path(xdg) : fs::path(home && *home ? home : "/tmp") / ".cache";
  std::error_code ec;
  const fs::path first = io::split_first_part(model_path.string());
  fs::path absolute = fs::absolute(first, ec);
  std::string key = absolute.string();
  uint64_t h = XXH3_64bits(key.data(), key.size());
  return base / "sluice" / (first.filename().string() + "." + hex64(h) + ".sluice-index");
}

fs::path ShardIndex::save(const fs::path& model_path) const {
  nlohmann::json j;
  j["format"] = kFormat;
  j["file_size"] = model_.file_size;
  j["mtime_ns"] = model_.mtime_ns;
  j["header_digest"] = hex64(model_.header_digest);
  nlohmann::json tensors = nlohmann::json::array();
  for (const IndexedTensor& t : tensors_) {
    nlohmann::json d = nlohmann::json::array();
    for (uint64_t v : t.digests) d.push_back(hex64(v));
    tensors.push_back({{"name", t.name}, {"file_offset", t.file_offset}, {"bytes", t.bytes},
                       {"parts", t.n_parts}, {"xxh3", d}});
  }
  j["tensors"] = tensors;
  const std::string text = j.dump();
  for (const fs::path& target : {sidecar_path(model_path), cache_path(model_path)}) {
    std::error_code ec;
    fs::create_directories(target.parent_path(), ec);
    fs::path tmp = target.string() + ".tmp";
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      if (!out) continue;
      out << text;
      if (!out.flush()) continue;
    }
    fs::rename(tmp, target, ec);
    if (!ec) return target;
    fs::remove(tmp, ec);
  }
  throw Error(ErrorCode::io_error, "cannot write the shard index next to '" + model_path.string() + "' or in " +
                                       cache_path(model_path).parent_path().string());
}

namespace {

// Why a recorded fingerprint no longer matches the model; empty when it does.
std::string mismatch(const ModelFingerprint& recorded, const ModelFingerprint& current) {
  if (recorded.file_size != current.file_size) {
    return "the model is " + std::to_string(current.file_size) + " bytes, indexed at " +
           std::to_string(recorded.file_size);
  }
  if (recorded.header_digest != current.header_digest) return "the model's header changed";
  if (recorded.mtime_ns != current.mtime_ns) return "the model was modified after it was indexed (its mtime changed)";
  return {};
}

}  // namespace

ShardIndex::Lookup ShardIndex::lookup(const fs::path& model_path, const GgufFile& file, io::Reader& reader) {
  const ModelFingerprint current = fingerprint(model_path, file, reader);
  Lookup stale;  // the first sidecar found that cannot be used, if no other one can
  auto reject = [&](const fs::path& where, std::string why) {
    if (stale.state == IndexState::stale) return;
    stale.state = IndexState::stale;
    stale.path = where;
    stale.reason = std::move(why);
  };
  for (const fs::path& candidate : {sidecar_path(model_path), cache_path(model_path)}) {
    std::error_code ec;
    if (!fs::exists(candidate, ec)) continue;
    std::ifstream in(candidate, std::ios::binary);
    if (!fs::is_regular_file(candidate, ec) || !in) {
      reject(candidate, "the index cannot be read");
      continue;
    }
    nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || j.value("format", "") != kFormat) {
      reject(candidate, std::string("the index is not a ") + kFormat + " file");
      continue;
    }
    try {
      ShardIndex index;
      index.model_.file_size = j.at("file_size").get<uint64_t>();
      index.model_.mtime_ns = j.at("mtime_ns").get<int64_t>();
      index.model_.header_digest = parse_hex64(j.at("header_digest").get<std::string>());
      if (std::string why = mismatch(index.model_, current); !why.empty()) {
        reject(candidate, why);
        continue;
      }
      for (const auto& t : j.at("tensors")) {
        IndexedTensor it;
        it.name = t.at("name").get<std::string>();
        it.file_offset = t.at("file_offset").get<uint64_t>();
        it.bytes = t.at("bytes").get<uint64_t>();
        it.n_parts = t.at("parts").get<uint32_t>();
        for (const auto& d : t.at("xxh3")) it.digests.push_back(parse_hex64(d.get<std::string>()));
        const GgufTensorInfo* info = file.find_tensor(it.name);
        if (!info || info->file_offset != it.file_offset || info->n_bytes != it.bytes || it.n_parts == 0 ||
            it.digests.size() != it.n_parts) {
          throw Error(ErrorCode::invalid_file, "its entry for '" + it.name + "' does not match the model");
        }
        index.by_name_.emplace(it.name, index.tensors_.size());
        index.tensors_.push_back(std::move(it));
      }
      if (index.tensors_.size() != file.tensors().size()) {
        reject(candidate, "it lists " + std::to_string(index.tensors_.size()) + " tensors, the model has " +
                              std::to_string(file.tensors().size()));
        continue;
      }
      Lookup found;
      found.state = IndexState::current;
      found.index = std::move(index);
      found.path = candidate;
      return found;
    } catch (const nlohmann::json::exception& e) {
      reject(candidate, std::string("the index is malformed (") + e.what() + ")");
    } catch (const Error& e) {
      reject(candidate, e.what());
    }
  }
  return stale;  // missing when nothing was found
}

std::optional<ShardIndex> ShardIndex::load(const fs::path& model_path, const GgufFile& file, io::Reader& reader) {
  return lookup(model_path, file, reader).index;
}

std::optional<ShardIndex> index_for_run(VerifyMode mode, const fs::path& model_path, const GgufFile& file,
                                        io::Reader& reader, std::vector<std::string>& notices) {
  if (mode == VerifyMode::off) return std::nullopt;
  ShardIndex::Lookup found = ShardIndex::lookup(model_path, file, reader);
  const std::string model = model_path.string();
  switch (found.state) {
    case IndexState::current:
      return std::move(found.index);
    case IndexState::stale:
      throw Error(ErrorCode::corrupt_data, "shard index '" + found.path.string() + "' does not match '" + model + "' (" +
                                               found.reason + "), so its shards cannot be verified: re-run `sluice index '" +
                                               model + "'`, or pass --verify off to run unverified");
    case IndexState::missing:
      break;
  }
  if (mode == VerifyMode::require) {
    throw Error(ErrorCode::invalid_argument, "--verify require: '" + model + "' has no shard index; run `sluice index '" +
                                                 model + "'` first (or pass --verify on to run without one)");
  }
  notices.push_back("shards are not verified: '" + model + "' has no shard index (run `sluice index '" + model +
                    "'` once to check every shard as it lands; --verify off silences this)");
  return std::nullopt;
}

const IndexedTensor* ShardIndex::find(std::string_view tensor_name) const {
  auto it = by_name_.find(std::string(tensor_name));
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

uint64_t ShardIndex::digest(std::string_view tensor_name, uint32_t part) const {
  const IndexedTensor* t = find(tensor_name);
  if (!t || part >= t->n_parts) {
    throw Error(ErrorCode::internal, "no digest for '" + std::string(tensor_name) + "' part " + std::to_string(part));
  }
  return t->digests[part];
}

bool ShardIndex::verify(std::string_view tensor_name, uint32_t part, std::span<const std::byte> bytes) const {
  return xxh3_64(bytes) == digest(tensor_name, part);
}

uint64_t ShardIndex::extent_count() const {
  uint64_t n = 0;
  for (const auto& t : tensors_) n += t.n_parts;
  return n;
}

}  // namespace sluice::core
