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

void quiet_follower_stdout(const core::ExpertParallel* ep) {
  if (!ep || ep->leader()) return;
  std::fflush(stdout);
  if (!std::freopen("/dev/null", "w", stdout))
    throw Error(ErrorCode::io_error, "rank " + std::to_string(ep->rank()) + ": cannot send stdout to /dev/null");
}

}  // namespace sluice::tools
