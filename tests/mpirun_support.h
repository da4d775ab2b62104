// mpirun for the expert-parallel suites (tests/test_expert_parallel*.cpp, test_expert_partition.cpp):
// the launcher CI and containers need, `sluice run` with --logits-out under it, and each rank's
// line of what it computed and read.
#pragma once

#include <doctest/doctest.h>

#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "cache/trace.h"
#include "core/architectures.h"
#include "core/experts/expert_exchange.h"
#include "core/gguf/gguf.h"
#include "io/pread_reader.h"

#include "tests/test_support.h"

namespace sluice::test {

// mpirun as CI and containers need it: root allowed, more ranks than cores, shared memory only.
inline std::string mpirun(int np) {
  return "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader "
         "OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1 mpirun --oversubscribe -np " +
         std::to_string(np) + " ";
}

struct RunOutput {
  std::string text;
  std::vector<uint8_t> logits;
  std::string err;  // every rank's stderr
};

// `sluice run` of `model` on the ids, 8 greedy tokens, logits of every row; np 0: no mpirun and
// no --expert-parallel (the one-process reference). `extra` goes after --expert-parallel.
inline RunOutput run_logits(const std::filesystem::path& model, const std::string& ids, int np, const std::string& mode,
                            const std::string& extra = "") {
  const std::filesystem::path dir = temp_dir("expert_parallel");
  const std::filesystem::path logits = dir / "logits.f32";
  const std::string args = "run -m '" + model.string() + "' --tokens " + ids +
                           " -n 8 --kv-type f32 --temp 0 --ignore-eos " + mode + " --logits-out '" + logits.string() + "'";
  const CommandResult r = np == 0 ? run_sluice(args)
                                  : run_command(mpirun(np) + "'" + sluice_binary() + "' " + args +
                                                " --expert-parallel " + extra);
  CAPTURE(model);
  CAPTURE(np);
  CAPTURE(mode);
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  RunOutput out{r.out, read_file(logits), r.err};
  std::filesystem::remove_all(dir);
  REQUIRE(!out.logits.empty());
  return out;
}

// What one rank says it did: "sluice run: rank R of N: computed P expert products (W token rows),
// read B bytes of experts" (tools/expert_parallel_flag.h).
struct RankWork {
  uint64_t products = 0, rows = 0, bytes_read = 0;
};

// Each rank's line from a job's stderr, indexed by rank; exactly one per rank of np.
inline std::vector<RankWork> rank_work(const std::string& err, int np) {
  std::vector<RankWork> work(static_cast<size_t>(np));
  std::vector<int> seen(static_cast<size_t>(np), 0);
  const std::regex line(R"(sluice run: rank (\d+) of (\d+): computed (\d+) expert products \((\d+) token rows\), read (\d+) bytes)");
  for (auto it = std::sregex_iterator(err.begin(), err.end(), line); it != std::sregex_iterator(); ++it) {
    const std::smatch& m = *it;
    const int rank = std::stoi(m[1].str());
    REQUIRE_MESSAGE(std::stoi(m[2].str()) == np, err);
    REQUIRE_MESSAGE((rank >= 0 && rank < np), err);
    seen[static_cast<size_t>(rank)] += 1;
    work[static_cast<size_t>(rank)] = {std::stoull(m[3].str()), std::stoull(m[4].str()), std::stoull(m[5].str())};
  }
  for (int r = 0; r < np; ++r) REQUIRE_MESSAGE(seen[static_cast<size_t>(r)] == 1, "rank " << r << " of " << np << ": " << err);
  return work;
}

// The block of each MoE layer of `model`, in order (a profile's layers are its MoE layers).
inline std::vector<int> moe_blocks(const std::filesystem::path& model) {
  io::PreadReader reader(model.string());
  const core::ExpertGeometry g =
      core::architecture_for(core::GgufFile::parse(reader)).plan(reader, core::ArchLoadOptions{})->expert_geometry();
  std::vector<int> blocks;
  for (size_t b = 0; b < g.moe_layer.size(); ++b)
    if (g.moe_layer[b]) blocks.push_back(static_cast<int>(b));
  return blocks;
}

// The (token, slot) rows each rank computes under `partition` (its n_ranks), from a profile of
// the same run (`--profile-out`: every routed token's experts counted per MoE layer). `moe_block`
// maps the profile's MoE layer to the model's block, which a partition table is indexed by.
inline std::vector<uint64_t> expected_rows(const cache::ExpertProfile& profile, const std::vector<int>& moe_block,
                                           const core::ExpertPartition& partition) {
  std::vector<uint64_t> rows(static_cast<size_t>(partition.n_ranks), 0);
  REQUIRE(moe_block.size() == profile.n_layer);
  for (uint32_t l = 0; l < profile.n_layer; ++l)
    for (uint32_t e = 0; e < profile.n_expert; ++e)
      rows[static_cast<size_t>(partition.owner(moe_block[l], static_cast<int32_t>(e)))] +=
          static_cast<uint64_t>(profile.counts[static_cast<size_t>(l) * profile.n_expert + e]);
  return rows;
}

// The expert bytes each rank reads under `partition` when its cache holds all its experts and
// nothing is prefetched: every expert the run routes to (a count in `profile`) read once, as
// stored (its gate, up and down slices of blk.B.ffn_*_exps), by its owner.
inline std::vector<uint64_t> expected_read_bytes(const std::filesystem::path& model, const cache::ExpertProfile& profile,
                                                 const std::vector<int>& moe_block,
                                                 const core::ExpertPartition& partition) {
  io::PreadReader reader(model.string());
  const core::GgufFile file = core::GgufFile::parse(reader);
  std::vector<uint64_t> bytes(static_cast<size_t>(partition.n_ranks), 0);
  for (uint32_t l = 0; l < profile.n_layer; ++l) {
    uint64_t slice = 0;
    const std::string prefix = "blk." + std::to_string(moe_block[l]) + ".ffn_";
    for (const char* part : {"gate_exps.weight", "up_exps.weight", "down_exps.weight"}) {
      const core::GgufTensorInfo* t = file.find_tensor(prefix + part);
      REQUIRE_MESSAGE(t != nullptr, (prefix + part));
      slice += t->n_bytes / static_cast<uint64_t>(t->ne[2]);
    }
    for (uint32_t e = 0; e < profile.n_expert; ++e)
      if (profile.counts[static_cast<size_t>(l) * profile.n_expert + e] > 0)
        bytes[static_cast<size_t>(partition.owner(moe_block[l], static_cast<int32_t>(e)))] += slice;
  }
  return bytes;
}

}  // namespace sluice::test
