#include "tools/expert_parallel_flag.h"

#include <cstdio>

#include "common/error.h"

namespace sluice::tools {

void add_expert_parallel_option(cxxopts::Options& options) {
  options.add_options()(kExpertParallelFlag, kExpertParallelHelp);
}

std::unique_ptr<core::ExpertParallel> join_expert_parallel(const cxxopts::ParseResult& args, core::EngineOptions& eo) {
  if (!args.count(kExpertParallelFlag)) return nullptr;
  auto ep = std::make_unique<core::ExpertParallel>();
  eo.session.exchange = &ep->exchange();
  return ep;
}

void quiet_follower_stdout(const core::ExpertParallel* ep) {
  if (!ep || ep->leader()) return;
  std::fflush(stdout);
  if (!std::freopen("/dev/null", "w", stdout))
    throw Error(ErrorCode::io_error, "rank " + std::to_string(ep->rank()) + ": cannot send stdout to /dev/null");
}

}  // namespace sluice::tools
