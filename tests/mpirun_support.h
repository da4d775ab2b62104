// mpirun for the expert-parallel suites (tests/test_expert_parallel*.cpp, test_expert_partition.cpp):
// the launcher CI and containers need, and `sluice run` with --logits-out under it.
#pragma once

#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

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
  RunOutput out{r.out, read_file(logits)};
  std::filesystem::remove_all(dir);
  REQUIRE(!out.logits.empty());
  return out;
}

}  // namespace sluice::test
