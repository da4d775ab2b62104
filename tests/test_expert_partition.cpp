// The balanced expert partition (`--expert-parallel --expert-partition PROFILE`,
// core/experts/expert_partition.h): every expert owned exactly once, each rank the static count
// and an even share of the use mass, the same table on every rank; bad profiles are one clear
// error; and under mpirun the balanced split keeps one process's logits bit for bit, each rank
// computing the (token, slot) rows, and reading the bytes, of the experts the table gives it.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>

#include "cache/trace.h"
#include "common/error.h"
#include "core/architectures.h"
#include "core/experts/expert_partition.h"
#include "io/pread_reader.h"
#include "tests/mpirun_support.h"
#include "tests/test_support.h"

using namespace sluice;
namespace fs = std::filesystem;

namespace {

// Skewed (Zipf-like) use counts over a random permutation of each layer's experts, fixed seed.
cache::ExpertProfile skewed_profile(uint32_t n_layer, uint32_t n_expert, uint64_t seed) {
  cache::ExpertProfile p;
  p.n_layer = n_layer;
  p.n_expert = n_expert;
  p.n_tokens = 1000;
  p.counts.assign(static_cast<size_t>(n_layer) * n_expert, 0.0);
  std::mt19937_64 rng(seed);
  for (uint32_t l = 0; l < n_layer; ++l) {
    std::vector<uint32_t> perm(n_expert);
    for (uint32_t e = 0; e < n_expert; ++e) perm[e] = e;
    std::shuffle(perm.begin(), perm.end(), rng);
    for (uint32_t k = 0; k < n_expert; ++k) p.counts[l * n_expert + perm[k]] = std::floor(4000.0 / (k + 1));
  }
  return p;
}

// Block 0 dense, then `n_moe` MoE blocks (DeepSeek's layout).
core::ExpertGeometry geometry(int64_t n_moe, int64_t n_expert) {
  core::ExpertGeometry g{n_moe + 1, n_expert, 4, {false}};
  for (int64_t i = 0; i < n_moe; ++i) g.moe_layer.push_back(true);
  return g;
}

// Per rank, the use mass of one MoE block (profile layer `moe`, model block moe + 1).
std::vector<double> masses(const core::ExpertPartition& p, const cache::ExpertProfile& prof, uint32_t moe) {
  std::vector<double> m(static_cast<size_t>(p.n_ranks), 0.0);
  for (uint32_t e = 0; e < prof.n_expert; ++e)
    m[static_cast<size_t>(p.owner(static_cast<int>(moe + 1), static_cast<int32_t>(e)))] += prof.counts[moe * prof.n_expert + e];
  return m;
}

double spread(const std::vector<double>& m) { return *std::max_element(m.begin(), m.end()) - *std::min_element(m.begin(), m.end()); }

void check_error(const std::function<void()>& f, ErrorCode code, const std::string& text) {
  try {
    f();
    FAIL("no error; expected one containing: " << text);
  } catch (const Error& e) {
    CHECK(e.code() == code);
    CHECK_MESSAGE(std::string(e.what()).find(text) != std::string::npos, e.what());
  }
}

}  // namespace

TEST_CASE("a balanced partition owns every expert once, gives each rank the static count and an even use mass, on every rank alike") {
  const cache::ExpertProfile prof = skewed_profile(3, 64, 11);
  const core::ExpertGeometry g = geometry(3, 64);
  for (int n : {1, 2, 3, 5}) {
    CAPTURE(n);
    const core::ExpertPartition p0 = core::balanced_partition(prof, g, n, 0, "skewed");
    REQUIRE(p0.owners.size() == 4 * 64);
    core::ExpertPartition static_p{n, 0, 0, {}};
    for (int r = 0; r < n; ++r) {
      const core::ExpertPartition pr = core::balanced_partition(prof, g, n, r, "skewed");
      CHECK(pr.owners == p0.owners);  // the same table from the same file on every rank
      CHECK(pr.rank == r);
      for (int il = 0; il < 4; ++il) CHECK(pr.owned_count(il, 64, r) == static_p.owned_count(il, 64, r));
    }
    for (int32_t e = 0; e < 64; ++e) {
      CHECK(p0.owner(0, e) == e % n);  // the dense block keeps the static owners
      for (int il = 1; il < 4; ++il) {
        CHECK(p0.owner(il, e) >= 0);
        CHECK(p0.owner(il, e) < n);
      }
    }
    for (uint32_t moe = 0; moe < 3 && n > 1; ++moe) {
      CAPTURE(moe);
      const double largest = *std::max_element(prof.counts.begin() + moe * 64, prof.counts.begin() + (moe + 1) * 64);
      const double balanced = spread(masses(p0, prof, moe)), fixed = spread(masses(static_p, prof, moe));
      MESSAGE("ranks " << n << ", layer " << moe << ": mass spread balanced " << balanced << ", e mod N " << fixed);
      CHECK(balanced < fixed);
      CHECK(balanced <= largest);  // greedy's bound: never more than one expert's count apart
    }
  }
}

TEST_CASE("a profile that does not fit the model, has no counts, is missing or malformed is one clear error naming it") {
  const core::ExpertGeometry g = geometry(3, 64);
  check_error([&] { core::balanced_partition(skewed_profile(2, 64, 1), g, 2, 0, "short.profile"); },
              ErrorCode::invalid_argument,
              "--expert-partition: profile 'short.profile' is for 2 MoE layers x 64 experts, but the model has 3 x 64");
  check_error([&] { core::balanced_partition(skewed_profile(3, 32, 1), g, 2, 0, "narrow.profile"); },
              ErrorCode::invalid_argument, "is for 3 MoE layers x 32 experts, but the model has 3 x 64");
  cache::ExpertProfile empty = skewed_profile(3, 64, 1);
  std::fill(empty.counts.begin(), empty.counts.end(), 0.0);
  check_error([&] { core::balanced_partition(empty, g, 2, 0, "empty.profile"); }, ErrorCode::invalid_argument,
              "profile 'empty.profile' has no expert use counts");
  const fs::path dir = test::temp_dir("expert_partition");
  check_error([&] { core::read_partition_profile((dir / "absent.profile").string()); }, ErrorCode::invalid_argument,
              "--expert-partition: cannot read profile '" + (dir / "absent.profile").string() + "'");
  const fs::path bad = dir / "bad.profile";
  std::ofstream(bad) << "# sluice expert profile layers=1 experts=4 tokens=2\nlayer 0 1 2\n";
  try {
    core::read_partition_profile(bad.string());
    FAIL("a malformed profile was accepted");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find(bad.string()) != std::string::npos);
    CHECK(std::string(e.what()).find("expected 'layer 0' and 4 counts") != std::string::npos);
  }
  const auto r = test::run_sluice("run -m '" + (test::reference_dir() / "tiny/deepseek2/deepseek2-q4_k_m.gguf").string() +
                                  "' -p hi -n 1 --expert-partition '" + bad.string() + "'");
  CHECK(r.exit_code == 1);
  CHECK(r.err == "sluice run: error: --expert-partition needs --expert-parallel (it splits experts across ranks)\n");
  fs::remove_all(dir);
}

#ifdef SLUICE_HAVE_MPI

namespace {

std::string ids_of(const fs::path& json, bool reversed) {
  auto ids = nlohmann::json::parse(test::read_text(json))["prompt_tokens"].get<std::vector<int32_t>>();
  if (reversed) std::reverse(ids.begin(), ids.end());
  std::string s;
  for (int32_t t : ids) s += (s.empty() ? "" : ",") + std::to_string(t);
  return s;
}

// A profile of the model recorded by `sluice run --profile-out` on the prompt reversed (not the
// prompt the runs below score), checked to split some layer otherwise than e mod N.
fs::path record_profile(const fs::path& model, const fs::path& json, const fs::path& dir) {
  const fs::path profile = dir / "routing.profile";
  const auto r = test::run_sluice("run -m '" + model.string() + "' --tokens " + ids_of(json, true) +
                                  " -n 24 --temp 0 --ignore-eos --profile-out '" + profile.string() + "'");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const cache::ExpertProfile p = core::read_partition_profile(profile.string());
  core::ExpertGeometry all_moe{p.n_layer, p.n_expert, 1, std::vector<bool>(p.n_layer, true)};
  for (int n : {2, 3}) {
    const core::ExpertPartition b = core::balanced_partition(p, all_moe, n, 0, profile.string());
    int moved = 0;
    for (size_t i = 0; i < b.owners.size(); ++i) moved += b.owners[i] != static_cast<int32_t>((i % p.n_expert) % n);
    CAPTURE(n);
    CHECK(moved > 0);
  }
  return profile;
}

// Under mpirun -np 2 (a budget that caches every expert, no prefetch, so each routed expert is
// read exactly once, by its owner; `--cache-experts 100%` would not do: a rank's share of the
// arena does not hold all its experts where a layer mixes expert sizes, as kimi-k3's Q6_K downs do) and -np 3 (a streaming cache at 25%): one process's tokens and logits, and
// each rank computed the rows, and at -np 2 read the bytes, of the experts the balanced table gives
// it. The rows differ from what e mod N would give each rank (so a rank that ignored
// --expert-partition is seen); the bytes need not (each rank owns the static count of experts).
void check_balanced(const fs::path& model, const fs::path& json) {
  const fs::path dir = test::temp_dir("expert_partition_mpi");
  const fs::path profile = record_profile(model, json, dir);
  const std::string ids = ids_of(json, false);
  const std::vector<int> moe_block = test::moe_blocks(model);
  core::ExpertGeometry geometry;
  {
    io::PreadReader reader(model.string());
    geometry = core::architecture_for(core::GgufFile::parse(reader)).plan(reader, core::ArchLoadOptions{})->expert_geometry();
  }
  const cache::ExpertProfile partition_profile = core::read_partition_profile(profile.string());
  for (const auto& [np, mode] : {std::pair<int, std::string>{2, "--budget 1G --prefetch-depth 0"},
                                 std::pair<int, std::string>{3, "--cache-experts 25%"}}) {
    CAPTURE(model);
    CAPTURE(np);
    // The one process's routing on the scored prompt: the rows each rank must compute.
    const fs::path scored = dir / "scored.profile";
    const test::RunOutput one = test::run_logits(model, ids, 0, mode + " --profile-out '" + scored.string() + "'");
    const cache::ExpertProfile routed = cache::parse_profile(test::read_text(scored), scored.string());
    const test::RunOutput ep = test::run_logits(model, ids, np, mode, "--expert-partition '" + profile.string() + "'");
    CHECK(ep.text == one.text);
    CHECK_MESSAGE(ep.logits == one.logits, "logits differ from one process's");
    const core::ExpertPartition balanced = core::balanced_partition(partition_profile, geometry, np, 0, profile.string());
    const core::ExpertPartition by_id{np, 0, 0, {}};
    const std::vector<uint64_t> rows = test::expected_rows(routed, moe_block, balanced);
    REQUIRE(rows != test::expected_rows(routed, moe_block, by_id));
    const std::vector<uint64_t> bytes = test::expected_read_bytes(model, routed, moe_block, balanced);
    const bool reads_exact = mode.find("--budget") != std::string::npos;
    const std::vector<test::RankWork> work = test::rank_work(ep.err, np);
    for (int r = 0; r < np; ++r) {
      CAPTURE(r);
      CHECK(work[static_cast<size_t>(r)].rows == rows[static_cast<size_t>(r)]);
      if (reads_exact) CHECK(work[static_cast<size_t>(r)].bytes_read == bytes[static_cast<size_t>(r)]);
      else CHECK(work[static_cast<size_t>(r)].bytes_read > 0);
    }
  }
  fs::remove_all(dir);
}

}  // namespace

TEST_CASE("mpirun -np 2 and 3 with a balanced --expert-partition gives one process's logits bit for bit on deepseek2 and kimi-k3") {
  const fs::path ds = test::reference_dir() / "tiny" / "deepseek2";
  check_balanced(ds / "deepseek2-q4_k_m.gguf", ds / "deepseek2-q4_k_m.json");
  const fs::path k3 = test::reference_dir() / "kimi-k3";
  check_balanced(k3 / "kimi-k3-q4_k_m.gguf", k3 / "kimi-k3-q4_k_m.json");
}

#endif
