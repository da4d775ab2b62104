// --expert-parallel: the flag run, bench and serve share (app/expert_parallel.h).
#pragma once

#include <cxxopts.hpp>
#include <memory>
#include <string>

#include "app/expert_parallel.h"
#include "core/engine.h"

namespace sluice::tools {

inline constexpr const char* kExpertParallelFlag = "expert-parallel";
inline constexpr const char* kExpertParallelHelp =
    "under mpirun -np N: split the routed experts across the N ranks (each reads, caches and computes its "
    "own; --budget and --cache-experts are per rank, --cache-experts a share of the rank's experts)";

inline constexpr const char* kExpertPartitionFlag = "expert-partition";
inline constexpr const char* kExpertPartitionHelp =
    "with --expert-parallel: a profile (--profile-out of run/bench, or tune --profile-out) whose expert use "
    "counts balance each layer's experts across the ranks; without it expert e goes to rank e mod N";

// --expert-parallel and --expert-partition FILE.
void add_expert_parallel_option(cxxopts::Options& options);
// With --expert-parallel: joins the MPI job and points `eo` at its exchange (and
// `eo.expert_partition` at the --expert-partition file); null otherwise.
// Error(invalid_argument) for --expert-partition without --expert-parallel.
// Error(unsupported) in a build without MPI.
std::unique_ptr<core::ExpertParallel> join_expert_parallel(const cxxopts::ParseResult& args, core::EngineOptions& eo);
// One line of what this rank did, e.g. "rank 1 of 2: computed 37 expert products (212 token rows),
// read 1234567 bytes of experts": what shows that the ranks split the work (their products and
// rows add up to one process's, their expert reads too when nothing is evicted).
std::string describe_rank_work(const core::ExpertParallel& ep, core::Engine& engine);
// Rank > 0 of a job: stdout goes to /dev/null (rank 0 prints the text; every rank computes it).
void quiet_follower_stdout(const core::ExpertParallel* ep);

}  // namespace sluice::tools
