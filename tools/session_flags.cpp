#include "tools/session_flags.h"

#include <thread>

#include "common/error.h"

namespace sluice::tools {

SessionFlags read_session_flags(const cxxopts::ParseResult& args, bool has_ctx) {
  SessionFlags f;
  const unsigned threads = args["threads"].as<unsigned>();
  if (threads == 0) throw Error(ErrorCode::invalid_argument, "-t 0: give at least 1 thread");
  const unsigned cpus = std::max(1u, std::thread::hardware_concurrency());
  f.threads = std::min(threads, cpus);
  if (threads > cpus)
    f.notes.push_back("-t " + std::to_string(threads) + " is more than the " + std::to_string(cpus) + " CPUs here; using " +
                      std::to_string(cpus));
  if (has_ctx) {
    f.n_ctx = args["ctx-size"].as<int64_t>();
    if (f.n_ctx < 0 || f.n_ctx > kMaxContext)
      throw Error(ErrorCode::invalid_argument, "-c " + std::to_string(f.n_ctx) + " must be in [0, " + std::to_string(kMaxContext) +
                                                   "] (0: the model's training context, at most 4096)");
  }
  f.n_batch = args["batch-size"].as<int64_t>();
  if (f.n_batch < 1 || f.n_batch > kMaxBatch)
    throw Error(ErrorCode::invalid_argument, "-b " + std::to_string(f.n_batch) + " must be in [1, " + std::to_string(kMaxBatch) + "]");
  return f;
}

}  // namespace sluice::tools
