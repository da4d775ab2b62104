// sluice perplexity -m MODEL -f TEXT [-c CTX] [--budget SIZE | --cache-experts F | --in-core]
//                   [--kl-base-out FILE | --kl-base FILE] [--expert-parallel]: llama-perplexity's
// number for a text (app/perplexity.h), computed out of core inside the budget, with a progress
// bar. Under mpirun with --expert-parallel every rank evaluates (the experts split across them);
// rank 0 prints, draws the bar and writes --kl-base-out.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include <cxxopts.hpp>

#include "common/error.h"
#include "core/engine.h"
#include "app/perplexity.h"
#include "core/text/tokenizer.h"
#include "tools/commands.h"
#include "tools/engine_flags.h"
#include "tools/expert_parallel_flag.h"
#include "tools/session_flags.h"
#include "tools/llama_flags.h"
#include "tools/memory_flags.h"
#include "tools/progress_bar.h"
#include "tools/verify_flag.h"

namespace sluice::tools {

namespace {

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorCode::invalid_argument, "cannot read the text file '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

int cmd_perplexity(int argc, char** argv) {
  cxxopts::Options options("sluice perplexity", "Perplexity of a text as llama-perplexity computes it (second half of each "
                                                "chunk scored), and KL divergence against a base run");
  options.add_options()
      ("f,file", "the text to score (UTF-8)", cxxopts::value<std::string>())
      ("c,ctx-size", "tokens per chunk, as llama-perplexity's -c (0: min(training context, 4096))", cxxopts::value<int64_t>()->default_value("512"))
      ("b,batch-size", "most tokens per forward pass", cxxopts::value<int64_t>()->default_value("512"))
      ("chunks", "score at most this many chunks (-1: all)", cxxopts::value<int64_t>()->default_value("-1"))
      ("t,threads", "worker threads", cxxopts::value<unsigned>()->default_value("1"))
      ("kl-base-out", "save this run's log-probabilities as the base for a later --kl-base run", cxxopts::value<std::string>())
      ("kl-base", "compare with a base saved by --kl-base-out: mean KL divergence and same-top share", cxxopts::value<std::string>())
      ("h,help", "show this help");
  add_engine_flags(options, {});
  add_expert_parallel_option(options);
  LlamaArgv llama_argv(argc, argv);
  auto args = options.parse(llama_argv.argc(), llama_argv.argv());
  if (args.count("help")) {
    std::cout << options.help();
    return 0;
  }
  if (!args.count("model")) throw Error(ErrorCode::invalid_argument, "-m MODEL.gguf is required");
  if (!args.count("file")) throw Error(ErrorCode::invalid_argument, "-f TEXT is required (the text to score)");
  if (args.count("kl-base-out") && args.count("kl-base"))
    throw Error(ErrorCode::invalid_argument, "give --kl-base-out (write a base) or --kl-base (compare with one), not both");
  const std::string model_path = args["model"].as<std::string>();
  const std::string text = read_text_file(args["file"].as<std::string>());
  const SessionFlags sf = read_session_flags(args);
  for (const auto& note : sf.notes) std::fprintf(stderr, "sluice perplexity: %s\n", note.c_str());

  core::EngineOptions eo = read_engine_flags(args, {}, sf);
  eo.session.prefetch_depth = 0;  // prompt batches only: prediction is for decode

  const std::unique_ptr<core::ExpertParallel> ep = join_expert_parallel(args, eo);
  const bool leader = !ep || ep->leader();
  quiet_follower_stdout(ep.get());
  core::Engine engine(eo);
  for (const auto& notice : engine.notices()) std::fprintf(stderr, "sluice perplexity: %s\n", notice.c_str());
  const core::Tokenizer tokenizer = core::Tokenizer::from_gguf(engine.gguf());
  std::fprintf(stderr, "sluice perplexity: %s\nsluice perplexity: %s\n", engine.describe_model().c_str(),
               engine.describe_budget().c_str());

  const std::vector<int32_t> tokens = tokenizer.encode(text, true, false);
  core::PerplexityOptions po;
  po.n_ctx = engine.n_ctx();
  po.n_batch = engine.n_batch();
  po.max_chunks = args["chunks"].as<int64_t>();
  po.add_bos = tokenizer.add_bos();
  if (po.add_bos) po.bos = tokenizer.bos();
  const int64_t n_chunks = core::perplexity_chunks(static_cast<int64_t>(tokens.size()), po);
  std::fprintf(stderr, "sluice perplexity: %zu tokens, %lld chunks of %lld, batch %lld\n", tokens.size(),
               static_cast<long long>(n_chunks), static_cast<long long>(po.n_ctx), static_cast<long long>(po.n_batch));

  std::optional<core::KlBaseWriter> base_out;
  std::optional<core::KlBaseReader> base_in;
  if (args.count("kl-base-out") && leader) base_out.emplace(args["kl-base-out"].as<std::string>(), engine.n_vocab(), po.n_ctx, n_chunks, tokens);
  if (args.count("kl-base")) base_in.emplace(args["kl-base"].as<std::string>(), engine.n_vocab(), po.n_ctx, n_chunks, tokens);

  ProgressBar bar("perplexity");
  const core::ForwardFn forward = [&engine](std::span<const int32_t> t, int64_t pos) { return engine.forward(t, pos, true); };
  const core::PerplexityResult r =
      core::compute_perplexity(forward, engine.n_vocab(), tokens, po, base_out ? &*base_out : nullptr,
                               base_in ? &*base_in : nullptr, [&bar, leader](int64_t done, int64_t total) {
                                 if (leader) bar.update(static_cast<uint64_t>(done), static_cast<uint64_t>(total));
                               });
  bar.finish();
  if (base_out) base_out->close();

  for (size_t i = 0; i < r.chunk_ppl.size(); ++i) std::printf("[%zu]%.4f,", i + 1, r.chunk_ppl[i]);
  std::printf("\nFinal estimate: PPL = %.4f +/- %.5f\n", r.ppl, r.ppl_error);
  if (r.has_kl)
    std::printf("KL divergence: mean %.6f +/- %.6f, max %.6f; same top token %.3f%%\n", r.kl.mean, r.kl.error, r.kl.max,
                100.0 * r.kl.same_top);
  std::fprintf(stderr, "sluice perplexity: %lld positions scored\n", static_cast<long long>(r.scored));
  return 0;
}

}  // namespace sluice::tools
