#include "tools/expert_parallel_flag.h"

#include <cstdio>

#include "common/error.h"

namespace sluice::tools {

void add_expert_parallel_option(cxxopts::Options& options) {
  options.add_options()(kExpertParallelFlag, kExpertParallelHelp)(kExpertPartitionFlag, kExpertPartitionHelp,
                                                                 cxxopts::value<std::string>(), "FILE");
}

std::unique_ptr<core::ExpertParallel> join_expert_parallel(const cxxopts::ParseResult& args, core::EngineOptions& eo) {
  if (!args.count(kExpertParallelFlag)) {
    if (args.count(kExpertPartitionFlag))
      throw Error(ErrorCode::invalid_argument, "--expert-partition needs --expert-parallel (it splits experts across ranks)");
    return nullptr;
  }
  auto ep = std::make_unique<core::ExpertParallel>();
  eo.session.exchange = &ep->exchange();
  if (args.count(kExpertPartitionFlag)) eo.expert_partition = args[kExpertPartitionFlag].as<std::string>();
  return ep;
}

std::string describe_rank_work(const core::ExpertParallel& ep, core::Engine& engine) {
  const core::ComputedExperts c = ep.stats().computed;
  const uint64_t read = engine.cache() ? engine.cache()->stats().total.bytes_read : 0;
  char buf[200];
  std::snprintf(buf, sizeof buf, "rank %d of %d: computed %llu expert products (%llu token rows), read %llu bytes of experts%s",
                ep.rank(), ep.n_ranks(), static_cast<unsigned long long>(c.products), static_cast<unsigned long long>(c.rows),
                static_cast<unsigned long long>(read), engine.cache() ? "" : " (experts in core)");
  return buf;
}

void quiet_follower_stdout(const core::ExpertParallel* ep) {
  if (!ep || ep->leader()) return;
  std::fflush(stdout);
  if (!std::freopen("/dev/null", "w", stdout))
    throw Error(ErrorCode::io_error, "rank " + std::to_string(ep->rank()) + ": cannot send stdout to /dev/null");
}

}  // namespace sluice::tools
