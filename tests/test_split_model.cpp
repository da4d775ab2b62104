// Split models end to end: llama.cpp's gguf-split copies of deepseek2-q4_k_m (3 and 4 parts,
// ../shared/reference/tiny/deepseek2/split) give the unsplit file's tensors, tokens and logits bit
// for bit, in core and out of core, with io_uring and with pread, opened from any part; the
// commands (run, inspect, tokenize, index, bench io) accept them.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/engine.h"
#include "core/gguf/gguf.h"
#include "core/gguf/gguf_writer.h"
#include "core/gguf/shard_index.h"
#include "io/pread_reader.h"
#include "tests/model_reference.h"

using namespace sluice;
using namespace sluice::test;

namespace {

std::filesystem::path split_dir() { return tiny_dir("deepseek2") / "split"; }
std::filesystem::path unsplit_path() { return tiny_dir("deepseek2") / "deepseek2-q4_k_m.gguf"; }

struct SplitSet {
  std::string dir;  // relative to split/, as split.json names it
  std::vector<std::string> parts;
};

// The sets split.json describes, with their part files.
std::vector<SplitSet> reference_sets() {
  const auto j = nlohmann::json::parse(read_text(split_dir() / "split.json"));
  std::vector<SplitSet> sets;
  for (const auto& s : j["splits"]) {
    SplitSet set{s["dir"].get<std::string>(), {}};
    for (const auto& p : s["parts"]) set.parts.push_back((split_dir() / set.dir / p["file"].get<std::string>()).lexically_normal().string());
    sets.push_back(set);
  }
  REQUIRE(sets.size() == 2);
  return sets;
}

std::vector<float> teacher_forced(core::Engine& e, const Manifest& m) {
  std::vector<float> all;
  const size_t b = static_cast<size_t>(e.n_batch());
  for (size_t i = 0; i < m.prompt.size(); i += b) {
    const size_t n = std::min(b, m.prompt.size() - i);
    auto rows = e.forward({m.prompt.data() + i, n}, static_cast<int64_t>(i));
    all.insert(all.end(), rows.begin(), rows.end());
  }
  for (size_t s = 0; s < m.gen.size(); ++s) {
    auto row = e.forward({&m.gen[s], 1}, static_cast<int64_t>(m.prompt.size() + s));
    all.insert(all.end(), row.begin(), row.end());
  }
  return all;
}

core::EngineOptions engine_options(const std::string& path, bool in_core, io::IoKind kind) {
  core::EngineOptions o;
  o.model_path = path;
  o.session.n_ctx = 64;
  o.session.kv_type = GgmlType::F32;
  o.threads = 2;
  o.in_core = in_core;
  if (!in_core) o.cache_experts = 0.25;
  o.io.kind = kind;
  return o;
}

}  // namespace

TEST_CASE("a split model's directory is the unsplit file's: same tensors, types, shapes and bytes, parts as split.json says") {
  io::PreadReader whole_reader(unsplit_path().string());
  const core::GgufFile whole = core::GgufFile::parse(whole_reader);
  const auto j = nlohmann::json::parse(read_text(split_dir() / "split.json"));
  const auto sets = reference_sets();
  for (size_t si = 0; si < sets.size(); ++si) {
    for (const std::string& opened_as : sets[si].parts) {
      CAPTURE(opened_as);
      io::PreadReader reader(opened_as);
      const core::GgufFile split = core::GgufFile::parse(reader);
      REQUIRE(split.parts().size() == sets[si].parts.size());
      CHECK(split.is_split());
      const auto& jparts = j["splits"][si]["parts"];
      uint64_t bytes = 0;
      for (size_t p = 0; p < split.parts().size(); ++p) {
        CHECK(split.parts()[p].path == sets[si].parts[p]);
        CHECK(split.parts()[p].bytes == jparts[p]["bytes"].get<uint64_t>());
        CHECK(split.parts()[p].tensor_count == jparts[p]["n_tensors"].get<uint64_t>());
        bytes += split.parts()[p].bytes;
      }
      CHECK(split.file_size() == bytes);
      CHECK(split.architecture() == "deepseek2");
      CHECK(split.get_uint("deepseek2.block_count") == whole.get_uint("deepseek2.block_count"));
      REQUIRE(split.tensors().size() == whole.tensors().size());
      for (size_t i = 0; i < whole.tensors().size(); ++i) {
        const auto& a = whole.tensors()[i];
        const auto& b = split.tensors()[i];
        CAPTURE(a.name);
        CHECK(b.name == a.name);
        CHECK(b.type == a.type);
        CHECK(b.ne == a.ne);
        CHECK(b.n_bytes == a.n_bytes);
        // The tensor is where split.json lists it, and its bytes are the unsplit file's.
        const auto& names = jparts[b.part]["tensors"];
        CHECK(std::find(names.begin(), names.end(), b.name) != names.end());
        CHECK(core::read_tensor_bytes(reader, b) == core::read_tensor_bytes(whole_reader, a));
      }
    }
  }
}

TEST_CASE("split files give the unsplit file's logits bit for bit, in core and out of core, with io_uring and pread") {
  const Manifest m = load_manifest("deepseek2", "q4_k_m");
  const auto sets = reference_sets();
  for (bool in_core : {true, false}) {
    for (auto kind : {io::IoKind::uring, io::IoKind::pread}) {
      CAPTURE(in_core);
      CAPTURE(io::to_string(kind));
      core::Engine whole(engine_options(unsplit_path().string(), in_core, kind));
      const std::vector<float> want = teacher_forced(whole, m);
      // Out of core, the cache must actually stream (and evict) for the comparison to mean anything.
      if (!in_core) CHECK(whole.cache()->stats().total.evictions > 0);
      for (const SplitSet& set : sets) {
        for (const std::string& opened_as : {set.parts.front(), set.parts.back()}) {
          CAPTURE(opened_as);
          core::Engine split(engine_options(opened_as, in_core, kind));
          CHECK(split.gguf().parts().size() == set.parts.size());
          CHECK(split.n_batch() == whole.n_batch());
          const std::vector<float> got = teacher_forced(split, m);
          REQUIRE(got.size() == want.size());
          CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
          // (Bytes read are not compared: speculative prefetch depends on timing.)
          if (!in_core) CHECK(split.cache()->stats().total.evictions > 0);
        }
      }
      // And llama.cpp's tokens and routing, as for the unsplit file.
      const Comparison c = compare(m, TeacherForced{want, {}});
      CHECK(c.tokens_equal == static_cast<int>(m.gen.size()));
      CHECK(c.max_diff <= 0.6);
    }
  }
}

TEST_CASE("sluice run on any part prints the unsplit file's text and logits, in core and at --cache-experts 25%") {
  const Manifest m = load_manifest("deepseek2", "q4_k_m");
  const auto set = reference_sets()[1];  // the 4-part set
  const std::string common = " -p '" + m.json["prompt_text"].get<std::string>() +
                             "' -n 16 --kv-type f32 -c 128 --temp 0 --ignore-eos -t 2";
  for (const char* mode : {" --in-core", " --cache-experts 25% --io pread", " --cache-experts 25% --io uring"}) {
    CAPTURE(mode);
    const auto dir = temp_dir("split-run");
    const auto want_logits = dir / "whole.f32", got_logits = dir / "split.f32";
    const auto whole = run_sluice("run -m '" + unsplit_path().string() + "'" + common + mode + " --logits-out '" + want_logits.string() + "'");
    REQUIRE_MESSAGE(whole.exit_code == 0, whole.err);
    const auto split = run_sluice("run -m '" + set.parts[2] + "'" + common + mode + " --logits-out '" + got_logits.string() + "'");
    REQUIRE_MESSAGE(split.exit_code == 0, split.err);
    const std::string prompt = m.json["prompt_text"].get<std::string>();
    REQUIRE(whole.out.starts_with(prompt));  // run -p prints the prompt first
    require_text(whole.out.substr(prompt.size()), "the unsplit file's continuation");
    CHECK(split.out == whole.out);
    const auto a = read_file(want_logits), b = read_file(got_logits);
    CHECK(a.size() == (m.prompt.size() + 16) * static_cast<size_t>(m.n_vocab) * 4);
    CHECK(a == b);
    std::string gen;
    for (const auto& piece : m.json["gen_pieces_hex"]) {  // exact bytes (pieces may split UTF-8)
      const std::string hex = piece.get<std::string>();
      for (size_t i = 0; i + 1 < hex.size(); i += 2) gen += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
    }
    CHECK_MESSAGE(split.out.find(require_text(gen, "llama.cpp's continuation")) != std::string::npos, split.out);
  }
}

TEST_CASE("inspect lists a split model's parts, and --json adds parts and each tensor's part") {
  const auto set = reference_sets()[0];
  const auto r = run_sluice("inspect --json --tensors '" + set.parts[1] + "'");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const auto j = nlohmann::json::parse(r.out);
  REQUIRE(j["parts"].size() == 3);
  const auto sj = nlohmann::json::parse(read_text(split_dir() / "split.json"))["splits"][0]["parts"];
  uint64_t total = 0;
  for (size_t p = 0; p < 3; ++p) {
    CHECK(j["parts"][p]["path"] == set.parts[p]);
    CHECK(j["parts"][p]["bytes"] == sj[p]["bytes"]);
    CHECK(j["parts"][p]["tensors"] == sj[p]["n_tensors"]);
    CHECK(j["parts"][p]["data_offset"].get<uint64_t>() > 0);
    total += j["parts"][p]["bytes"].get<uint64_t>();
  }
  CHECK(j["file_bytes"] == total);
  CHECK(j["tensor_count"] == 52);
  REQUIRE(j["tensors"].size() == 52);
  for (const auto& t : j["tensors"]) {
    const auto& names = sj[t["part"].get<size_t>()]["tensors"];
    CHECK(std::find(names.begin(), names.end(), t["name"]) != names.end());
  }
  const auto text = run_sluice("inspect '" + set.parts[0] + "'");
  REQUIRE(text.exit_code == 0);
  CHECK(text.out.find("parts:         3") != std::string::npos);
  for (const auto& p : set.parts) CHECK(text.out.find(p) != std::string::npos);
}

TEST_CASE("sluice tokenize and bench io accept a split model") {
  const Manifest m = load_manifest("deepseek2", "q4_k_m");
  const auto set = reference_sets()[0];
  const auto t = run_sluice("tokenize --json '" + set.parts[2] + "' '" + m.json["prompt_text"].get<std::string>() + "'");
  REQUIRE_MESSAGE(t.exit_code == 0, t.err);
  CHECK(nlohmann::json::parse(t.out)["tokens"].get<std::vector<int32_t>>() == m.prompt);
  const auto b = run_sluice("bench io -m '" + set.parts[0] + "' --depths 1,4 --seconds 0.2 --read-size 64K --json");
  REQUIRE_MESSAGE(b.exit_code == 0, b.err);
  const auto j = nlohmann::json::parse(b.out);
  io::PreadReader reader(set.parts[0]);
  CHECK(j["file_size"] == reader.file_size());  // the address space of all three parts
  CHECK(reader.file_size() > std::filesystem::file_size(set.parts[0]) * 3);
  CHECK(j["max_gb_per_s"].get<double>() > 0);
}

TEST_CASE("sluice index writes one sidecar next to part 1 for the whole set, stale once any part changes") {
  const auto dir = temp_dir("split-index");
  const auto set = reference_sets()[0];
  std::vector<std::filesystem::path> parts;
  for (const auto& p : set.parts) {
    parts.push_back(dir / std::filesystem::path(p).filename());
    std::filesystem::copy_file(p, parts.back());
  }
  const auto r = run_sluice("index '" + parts[1].string() + "'");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const auto sidecar = parts[0].string() + ".sluice-index";
  CHECK(std::filesystem::exists(sidecar));
  CHECK(r.out.find(sidecar) != std::string::npos);
  CHECK(core::ShardIndex::sidecar_path(parts[2]) == sidecar);
  {
    io::PreadReader reader(parts[2].string());
    const core::GgufFile file = core::GgufFile::parse(reader);
    auto index = core::ShardIndex::load(parts[2], file, reader);
    REQUIRE(index.has_value());
    CHECK(index->tensors().size() == 52);
    const auto& t = file.tensor("blk.2.ffn_up_exps.weight");
    CHECK(t.part == 2);
    const auto bytes = core::read_tensor_bytes(reader, t);  // read from part 3 through the set
    const size_t slice = bytes.size() / 16;
    CHECK(index->verify(t.name, 3, std::span(bytes).subspan(3 * slice, slice)));
    CHECK_FALSE(index->verify(t.name, 4, std::span(bytes).subspan(3 * slice, slice)));
  }
  // Changing the last part alone makes the index stale.
  std::filesystem::last_write_time(parts[2], std::filesystem::last_write_time(parts[2]) + std::chrono::seconds(5));
  io::PreadReader reader(parts[0].string());
  const core::GgufFile file = core::GgufFile::parse(reader);
  CHECK_FALSE(core::ShardIndex::load(parts[0], file, reader).has_value());
}
