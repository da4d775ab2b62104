// sluice run -m MODEL.gguf -p "prompt" -n 64 [--budget 29G]: generate text, routed experts
// streamed from disk through the budgeted cache (or all in RAM with --in-core).
// Text goes to stdout as it is produced; load and speed figures go to stderr.
#include <chrono>
#include <filesystem>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>

#include <cxxopts.hpp>

#include "common/error.h"
#include "common/units.h"
#include "app/bench.h"
#include "core/engine.h"
#include "core/gpu/vram_expert_cache.h"
#include "core/llama/model.h"
#include "app/generate.h"
#include "app/prompt_cache.h"
#include "app/sampler.h"
#include "core/llama/session.h"
#include "core/text/tokenizer.h"
#include "io/fault_reader.h"
#include "kernels/thread_pool.h"
#include "tools/commands.h"
#include "tools/engine_flags.h"
#include "tools/expert_parallel_flag.h"
#include "tools/llama_flags.h"
#include "tools/session_flags.h"
#include "tools/memory_flags.h"
#include "tools/progress_bar.h"
#include "tools/routing_outputs.h"
#include "tools/status_line.h"
#include "tools/verify_flag.h"

namespace sluice::tools {

namespace {

// Test-only switch, read here and nowhere else: see its use in cmd_run.
constexpr const char* kIgnoreBudgetForTests = "SLUICE_TEST_IGNORE_BUDGET";

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::vector<int32_t> parse_token_list(const std::string& text) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < text.size()) {
    size_t j = text.find(',', i);
    if (j == std::string::npos) j = text.size();
    const std::string item = text.substr(i, j - i);
    try {
      size_t used = 0;
      const long v = std::stol(item, &used);
      if (used != item.size() || v < 0 || v > INT32_MAX) throw std::invalid_argument("range");
      ids.push_back(static_cast<int32_t>(v));
    } catch (const std::exception&) {
      throw Error(ErrorCode::invalid_argument, "--tokens: '" + item + "' is not a token id");
    }
    i = j + 1;
  }
  return ids;
}

std::string read_prompt_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorCode::invalid_argument, "-f: cannot read the prompt file '" + path + "'");
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// --stats: one line per generated token and a summary, from the cache's counters.
class StatsPrinter {
 public:
  StatsPrinter(core::Engine& engine, bool enabled) : engine_(engine), enabled_(enabled), status_(enabled) {}
  void begin() {
    if (!enabled_) return;
    t_ = Clock::now();
    if (engine_.cache()) before_ = engine_.cache()->stats().total;
    if (engine_.gpu()) gpu_before_ = engine_.gpu()->counters();
    if (!started_) start_ = before_, gpu_start_ = gpu_before_;  // the summary covers decode only
    started_ = true;
  }
  void token(int index) {
    if (!enabled_) return;
    double ms = seconds_since(t_) * 1e3;
    char buf[320];
    if (!engine_.cache()) {
      std::snprintf(buf, sizeof buf, "[token %d] %.2f ms (experts in core)", index, ms);
    } else {
      cache::CacheCounters now = engine_.cache()->stats().total;
      std::snprintf(buf, sizeof buf, "[token %d] %.2f ms  hits %llu  misses %llu  read %.2f MB  io wait %.2f ms", index, ms,
                    static_cast<unsigned long long>(now.hits - before_.hits),
                    static_cast<unsigned long long>(now.misses - before_.misses), (now.bytes_read - before_.bytes_read) / 1e6,
                    (now.io_wait_ns - before_.io_wait_ns) / 1e6);
    }
    std::string line = buf;
    if (engine_.gpu()) {
      const core::GpuCounters d = engine_.gpu()->counters() - gpu_before_;
      std::snprintf(buf, sizeof buf, "  gpu %llu/cpu %llu products  vram hits %llu  copied up %llu  cpu fallbacks %llu",
                    static_cast<unsigned long long>(d.products_gpu), static_cast<unsigned long long>(d.products_cpu),
                    static_cast<unsigned long long>(d.expert_hits), static_cast<unsigned long long>(d.experts_copied),
                    static_cast<unsigned long long>(d.expert_cpu_fallbacks));
      line += buf;
    }
    // On a terminal the figures update in place on the bottom row, out of the text's way.
    if (status_.active()) status_.update(line);
    else std::fprintf(stderr, "%s\n", line.c_str());
  }
  void summary(double seconds) {
    if (!enabled_) return;
    status_.close();
    std::fprintf(stderr, "sluice run: peak RSS %llu bytes (%s) with %s accounted to the budget\n",
                 static_cast<unsigned long long>(core::peak_rss_bytes()), human_bytes(core::peak_rss_bytes()).c_str(),
                 human_bytes(engine_.budget().total()).c_str());
    if (engine_.gpu())
      std::fprintf(stderr, "sluice run: decode on the GPU tier: %s, %llu VRAM evictions\n",
                   core::GpuTier::describe(engine_.gpu()->counters() - gpu_start_).c_str(),
                   static_cast<unsigned long long>(engine_.gpu()->evictions()));
    if (!engine_.cache()) return;
    cache::CacheStats s = engine_.cache()->stats();
    const cache::CacheCounters& t = s.total;
    uint64_t hits = t.hits - start_.hits, misses = t.misses - start_.misses, bytes = t.bytes_read - start_.bytes_read;
    std::fprintf(stderr,
                 "sluice run: decode hit rate %.1f%% (%llu hits, %llu misses), read %s (%.2f GB/s achieved), "
                 "IO wait %.1f%% of decode time, %llu evictions, %s resident in the expert cache\n",
                 hits + misses ? 100.0 * hits / (hits + misses) : 0.0, static_cast<unsigned long long>(hits),
                 static_cast<unsigned long long>(misses), human_bytes(bytes).c_str(), seconds > 0 ? bytes / seconds / 1e9 : 0.0,
                 seconds > 0 ? 100.0 * (t.io_wait_ns - start_.io_wait_ns) / 1e9 / seconds : 0.0,
                 static_cast<unsigned long long>(t.evictions), human_bytes(s.resident_bytes).c_str());
    if (cache::ShardCache* layers = engine_.layer_cache()) {
      const cache::CacheCounters l = layers->stats().total;
      std::fprintf(stderr,
                   "sluice run: streamed layers: %llu hits, %llu misses, %llu prefetched, read %s, %llu layer evictions\n",
                   static_cast<unsigned long long>(l.hits), static_cast<unsigned long long>(l.misses),
                   static_cast<unsigned long long>(l.prefetches), human_bytes(l.bytes_read).c_str(),
                   static_cast<unsigned long long>(l.evictions));
    }
  }

 private:
  core::Engine& engine_;
  bool enabled_;
  Clock::time_point t_;
  cache::CacheCounters start_, before_;
  core::GpuCounters gpu_start_, gpu_before_;
  bool started_ = false;
  StatusLine status_;
};

// What run prints while the loop runs: each token as it comes (its piece, or its id without a
// tokenizer), the --stats lines around each decode step, and every logits row to --logits-out.
class RunPrinter final : public core::GenerateObserver {
 public:
  RunPrinter(const core::Tokenizer* tokenizer, StatsPrinter& stats) : tokenizer_(tokenizer), stats_(stats) {}
  void open_logits(const std::string& path) {
    logits_out_.open(path, std::ios::binary | std::ios::trunc);
    if (!logits_out_) throw Error(ErrorCode::io_error, "cannot write --logits-out '" + path + "'");
  }
  bool wants_prompt_logits() const override { return logits_out_.is_open(); }
  void on_rows(std::span<const float> rows) override {
    if (!logits_out_.is_open()) return;
    logits_out_.write(reinterpret_cast<const char*>(rows.data()), static_cast<std::streamsize>(rows.size_bytes()));
    if (!logits_out_) throw Error(ErrorCode::io_error, "write to --logits-out failed");
  }
  void on_token(int64_t index, int32_t token, bool) override {
    if (tokenizer_) std::fputs(tokenizer_->token_to_piece(token, false).c_str(), stdout);
    else std::printf("%s%d", index ? " " : "", token);
    std::fflush(stdout);
  }
  void on_decode_begin(int64_t) override { stats_.begin(); }
  void on_decode_end(int64_t index) override { stats_.token(static_cast<int>(index)); }
  // --prompt-cache: called once the prompt is in the session, before the first decode step (a
  // recurrent state holds exactly the prompt only then).
  void on_prefill_end(double) override {
    if (after_prompt_) after_prompt_();
  }
  void set_after_prompt(std::function<void()> f) { after_prompt_ = std::move(f); }

 private:
  const core::Tokenizer* tokenizer_;
  StatsPrinter& stats_;
  std::ofstream logits_out_;
  std::function<void()> after_prompt_;
};

// Sampled tokens in order (--prompt-cache-all saves the ones that were fed); sized once.
class TokenLog final : public core::GenerateObserver {
 public:
  TokenLog(core::GenerateObserver& next, size_t n) : next_(next) { tokens_.reserve(n); }
  bool wants_prompt_logits() const override { return next_.wants_prompt_logits(); }
  void on_rows(std::span<const float> rows) override { next_.on_rows(rows); }
  void on_prefill_end(double s) override { next_.on_prefill_end(s); }
  void on_token(int64_t index, int32_t token, bool end) override {
    tokens_.push_back(token);
    next_.on_token(index, token, end);
  }
  void on_decode_begin(int64_t index) override { next_.on_decode_begin(index); }
  void on_decode_end(int64_t index) override { next_.on_decode_end(index); }
  std::span<const int32_t> tokens() const { return tokens_; }

 private:
  core::GenerateObserver& next_;
  std::vector<int32_t> tokens_;
};

}  // namespace

int cmd_run(int argc, char** argv) {
  cxxopts::Options options("sluice run", "Generate text; routed experts stream from disk inside --budget");
  options.add_options()
      ("p,prompt", "prompt text (BOS is added when the model asks for it)", cxxopts::value<std::string>())
      ("f,file", "prompt text from a file (llama.cpp's -f)", cxxopts::value<std::string>())
      ("tokens", "prompt as comma-separated token ids instead of text", cxxopts::value<std::string>())
      ("n,n-predict", "tokens to generate", cxxopts::value<int>()->default_value("64"))
      ("t,threads", "worker threads", cxxopts::value<unsigned>()->default_value("1"))
      ("c,ctx-size", "context length (0: min(training context, 4096))", cxxopts::value<int64_t>()->default_value("0"))
      ("b,batch-size", "most prompt tokens per forward pass", cxxopts::value<int64_t>()->default_value("512"))
      ("ignore-eos", "keep generating after the end-of-sequence token")
      ("prefetch-depth", "predict the experts of this many MoE layers ahead and read them early (0: off)", cxxopts::value<int>()->default_value(std::to_string(core::kDefaultPrefetchDepth)))
      ("stats", "print a line per token (time, hits/misses, MB read, IO wait) and a summary")
      ("logits-out", "write f32 logits [n_prompt + n_generated][n_vocab] (LE) to FILE (with --prompt-cache: no rows for the reused prompt tokens)", cxxopts::value<std::string>())
      ("prompt-cache", "reuse the state of a saved prompt that starts this one from FILE, and save this prompt's state there (llama-cli's --prompt-cache)", cxxopts::value<std::string>())
      ("prompt-cache-ro", "with --prompt-cache: use FILE but never write it")
      ("prompt-cache-all", "with --prompt-cache: save the generated tokens' state too, at the end of the run")
      ("no-cnv", "accepted for llama-cli's -no-cnv: run is never a conversation")
      ("h,help", "show this help");
  constexpr EngineFlagSet kFlags{.widen_f16 = true, .io_faults = true, .gpu = true};
  add_engine_flags(options, kFlags);
  add_sampling_flags(options);
  add_routing_options(options);
  add_expert_parallel_option(options);
  LlamaArgv llama_argv(argc, argv);
  auto args = options.parse(llama_argv.argc(), llama_argv.argv());
  if (args.count("help")) {
    std::cout << options.help();
    return 0;
  }
  if (!args.count("model")) throw Error(ErrorCode::invalid_argument, "-m MODEL.gguf is required");
  if (args.count("prompt") + args.count("file") + args.count("tokens") != 1)
    throw Error(ErrorCode::invalid_argument, "give exactly one of -p PROMPT, -f FILE or --tokens IDS");
  std::optional<std::string> prompt_text;
  if (args.count("prompt")) prompt_text = args["prompt"].as<std::string>();
  if (args.count("file")) prompt_text = read_prompt_file(args["file"].as<std::string>());
  const int n_predict = args["n-predict"].as<int>();
  if (n_predict < 0) throw Error(ErrorCode::invalid_argument, "-n " + std::to_string(n_predict) + " must be >= 0");
  const std::string prompt_cache = args.count("prompt-cache") ? args["prompt-cache"].as<std::string>() : "";
  const bool cache_ro = args.count("prompt-cache-ro") > 0, cache_all = args.count("prompt-cache-all") > 0;
  if ((cache_ro || cache_all) && prompt_cache.empty())
    throw Error(ErrorCode::invalid_argument, std::string(cache_ro ? "--prompt-cache-ro" : "--prompt-cache-all") +
                                                 " needs --prompt-cache FILE");
  if (cache_ro && cache_all)
    throw Error(ErrorCode::invalid_argument, "--prompt-cache-ro and --prompt-cache-all contradict each other (-ro never writes)");
  const SessionFlags sf = read_session_flags(args);
  for (const auto& note : sf.notes) std::fprintf(stderr, "sluice run: %s\n", note.c_str());
  core::EngineOptions eo = read_engine_flags(args, kFlags, sf);
  const std::string model_path = eo.model_path;
  eo.session.prefetch_depth = args["prefetch-depth"].as<int>();
  eo.session.n_logit_rows = args.count("logits-out") ? 0 : 1;  // only --logits-out reads the prompt's rows
  if (eo.session.prefetch_depth < 0 || eo.session.prefetch_depth > 64)
    throw Error(ErrorCode::invalid_argument, "--prefetch-depth " + std::to_string(eo.session.prefetch_depth) + " must be in [0, 64]");
  if (const char* bypass = std::getenv(kIgnoreBudgetForTests); bypass && *bypass && std::string(bypass) != "0") {
    // Test-only: the negative control of the budget tests (tests/test_budget_rss.cpp) runs the
    // same command as a run that ignored --budget would, and must see the bound broken.
    std::fprintf(stderr, "sluice run: %s is set (test-only): --budget ignored, every expert loaded in core\n",
                 kIgnoreBudgetForTests);
    eo.budget_bytes = 0;
    eo.cache_experts = 0;
    eo.in_core = true;
  }

  // Every rank runs the whole command (same tokens, same sampler): rank 0 prints and writes files.
  const std::unique_ptr<core::ExpertParallel> ep = join_expert_parallel(args, eo);
  if (ep && !prompt_cache.empty())
    throw Error(ErrorCode::unsupported, "--prompt-cache with --expert-parallel: the ranks would have to load the same file "
                                        "in step; run without one of them");
  const bool leader = !ep || ep->leader();
  quiet_follower_stdout(ep.get());
  RoutingOutputs routing(args, model_path);
  eo.warm_profile = routing.warm_profile();
  const auto t_load = Clock::now();
  core::Engine engine(eo);
  for (const auto& notice : engine.notices()) std::fprintf(stderr, "sluice run: %s\n", notice.c_str());
  std::optional<core::Tokenizer> tokenizer;
  try {
    tokenizer = core::Tokenizer::from_gguf(engine.gguf());
  } catch (const Error& e) {
    if (prompt_text) throw;
  }
  std::fprintf(stderr, "sluice run: %s\nsluice run: %s\nsluice run: loaded in %.2f s (io %s%s%s)\n", engine.describe_model().c_str(),
               engine.describe_budget().c_str(), seconds_since(t_load), std::string(engine.reader().backend()).c_str(),
               engine.weights_mapped() ? ", weights mapped from the file" : "",
               engine.verifying() ? ", shards verified against the index" : "");

  if (engine.gpu()) std::fprintf(stderr, "sluice run: %s\n", engine.gpu()->describe().c_str());

  std::vector<int32_t> prompt = args.count("tokens")
                                    ? parse_token_list(args["tokens"].as<std::string>())
                                    : tokenizer->encode(*prompt_text, true, false);
  if (prompt.empty()) throw Error(ErrorCode::invalid_argument, "the prompt has no tokens");

  const int64_t n_ctx = engine.n_ctx();
  if (static_cast<int64_t>(prompt.size()) > n_ctx)
    throw Error(ErrorCode::invalid_argument, "prompt of " + std::to_string(prompt.size()) +
                                                 " tokens is longer than the context of " + std::to_string(n_ctx) +
                                                 " tokens (raise -c)");
  if (routing.recorder()) {
    routing.recorder()->begin_sequence(engine.model().expert_geometry(), n_ctx);
    engine.session().set_routing_observer(routing.recorder());
  }
  if (engine.has_warm_profile()) {
    ProgressBar bar("warm start");
    auto warm = engine.warm_up([&](uint64_t done, uint64_t total) { bar.update(done, total); });
    bar.finish();
    std::fprintf(stderr, "sluice run: %s\n", describe_warm(warm.shards, warm.bytes, warm.seconds).c_str());
  }
  StatsPrinter stats(engine, args.count("stats") > 0);
  const core::SamplerOptions sampling = read_sampling_flags(args);

  core::GenerateOptions go;
  go.max_tokens = n_predict;
  go.tokenizer = tokenizer ? &*tokenizer : nullptr;
  go.end_tokens = tokenizer && !args.count("ignore-eos") ? core::EndTokens::eos : core::EndTokens::none;
  // --prompt-cache (app/prompt_cache.h): the saved prefix goes into the session's own cache and
  // the prompt is fed from the first token it does not hold.
  std::optional<core::PromptCacheKey> cache_key;
  int64_t reused = 0;
  if (!prompt_cache.empty()) {
    cache_key = core::prompt_cache_key(engine);
    const core::PromptCacheLoad hit = core::load_prompt_cache(prompt_cache, *cache_key, engine.session(), prompt);
    reused = hit.reused;
    if (!hit.found)
      std::fprintf(stderr, "sluice run: prompt cache: %s does not exist%s\n", prompt_cache.c_str(),
                   cache_ro ? " (--prompt-cache-ro: it is not created)" : "; it is written after the prompt");
    else
      std::fprintf(stderr, "sluice run: prompt cache: %lld of %zu prompt tokens reused from %s (it holds %lld)%s\n",
                   static_cast<long long>(reused), prompt.size(), prompt_cache.c_str(),
                   static_cast<long long>(hit.saved_tokens),
                   reused == 0 && !engine.session().can_rewind()
                       ? "; a recurrent state is reused only by a prompt that extends all its tokens by 2 or more"
                       : "");
  }
  const auto save_cache = [&](std::span<const int32_t> tokens) {
    const uint64_t bytes = core::save_prompt_cache(prompt_cache, *cache_key, engine.session(), tokens);
    std::fprintf(stderr, "sluice run: prompt cache: saved %zu tokens (%s) to %s\n", tokens.size(),
                 human_bytes(bytes).c_str(), prompt_cache.c_str());
  };
  core::SequenceGenerator seq(engine.n_vocab(), n_ctx);
  seq.start(prompt, reused, go, sampling);
  RunPrinter printer(tokenizer ? &*tokenizer : nullptr, stats);
  if (args.count("logits-out") && leader) printer.open_logits(args["logits-out"].as<std::string>());
  if (!prompt_cache.empty() && !cache_ro && !cache_all) printer.set_after_prompt([&] { save_cache(prompt); });
  TokenLog sampled(printer, static_cast<size_t>(n_predict));
  if (tokenizer && prompt_text) {
    for (int32_t id : prompt) std::fputs(tokenizer->token_to_piece(id, false).c_str(), stdout);
    std::fflush(stdout);
  }
  const core::GenerateStats g = core::generate(engine, seq, &sampled);
  if (g.reason == core::StopReason::context_full)
    std::fprintf(stderr, "\nsluice run: context of %lld tokens is full\n", static_cast<long long>(engine.n_ctx()));
  const double prompt_s = g.prefill_seconds, gen_s = g.decode_seconds;
  std::printf("\n");
  if (cache_all) {
    std::vector<int32_t> all(prompt);
    const std::span<const int32_t> fed = sampled.tokens().first(static_cast<size_t>(g.decoded));
    all.insert(all.end(), fed.begin(), fed.end());
    save_cache(all);
  } else if (cache_ro) {
    std::fprintf(stderr, "sluice run: prompt cache: %s not updated (--prompt-cache-ro)\n", prompt_cache.c_str());
  }
  // The prompt rate counts the tokens this run computed (not those reused from --prompt-cache).
  std::fprintf(stderr, "sluice run: prompt %zu tokens in %.3f s (%.1f tok/s), generated %lld tokens in %.3f s (%.1f tok/s)\n",
               prompt.size(), prompt_s, g.prefilled_tokens / std::max(prompt_s, 1e-9), static_cast<long long>(g.generated), gen_s,
               static_cast<double>(g.generated) / std::max(gen_s, 1e-9));
  stats.summary(gen_s);
  if (ep) std::fprintf(stderr, "sluice run: %s\n", describe_rank_work(*ep, engine).c_str());
  if (leader) routing.write("run");
  if (const std::string faults = engine.describe_faults(); !faults.empty())
    std::fprintf(stderr, "sluice run: %s\n", faults.c_str());
  return 0;
}

}  // namespace sluice::tools
