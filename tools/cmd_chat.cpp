// sluice chat -m MODEL (--budget SIZE | --cache-experts F | --in-core): an interactive chat on the
// terminal over core::ChatSession (the model's chat template, or chatml when it has none; the KV
// cache kept between turns, so a turn prefills only its own tokens). Commands: /stats, /reset,
// /quit. Ctrl-C stops the current answer; at the prompt it (or Ctrl-D) leaves.
// Under mpirun with --expert-parallel every rank runs the chat (the experts split across them):
// rank 0 reads each line from stdin and broadcasts it, the other ranks print nothing. Ctrl-C is
// then mpirun's (it ends the job): one rank stopping an answer alone would leave the others
// waiting in the exchange.
#include <signal.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>

#include <cxxopts.hpp>

#include "common/error.h"
#include "common/units.h"
#include "app/chat_session.h"
#include "core/text/chat_template.h"
#include "core/engine.h"
#include "core/text/tokenizer.h"
#include "tools/commands.h"
#include "tools/engine_flags.h"
#include "tools/expert_parallel_flag.h"
#include "tools/session_flags.h"
#include "tools/llama_flags.h"
#include "tools/memory_flags.h"
#include "tools/verify_flag.h"

namespace sluice::tools {

namespace {

std::atomic<bool> g_interrupted{false};
void on_sigint(int) { g_interrupted.store(true); }

// The whole session's decode figures, for /stats.
struct ChatTotals {
  int64_t generated = 0, prefilled = 0;
  double decode_seconds = 0, prefill_seconds = 0;
  uint64_t hits = 0, misses = 0, bytes = 0;
  void add(const core::ChatTurnStats& t) {
    generated += t.generated_tokens;
    prefilled += t.prefilled_tokens;
    decode_seconds += t.decode_seconds;
    prefill_seconds += t.prefill_seconds;
    hits += t.cache_hits;
    misses += t.cache_misses;
    bytes += t.bytes_read;
  }
};

std::string rate(double n, double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", s > 0 ? n / s : 0.0);
  return b;
}

// The line under each answer.
std::string turn_line(const core::ChatTurnStats& t) {
  char b[256];
  const uint64_t lookups = t.cache_hits + t.cache_misses;
  std::snprintf(b, sizeof b, "[prefill %lld of %lld tokens, %s tok/s | %lld tokens, %s tok/s | hits %.0f%% | %.1f MB/token%s]",
                static_cast<long long>(t.prefilled_tokens), static_cast<long long>(t.prompt_tokens),
                rate(static_cast<double>(t.prefilled_tokens), t.prefill_seconds).c_str(),
                static_cast<long long>(t.generated_tokens), rate(static_cast<double>(t.generated_tokens), t.decode_seconds).c_str(),
                lookups ? 100.0 * static_cast<double>(t.cache_hits) / static_cast<double>(lookups) : 100.0,
                t.generated_tokens ? static_cast<double>(t.bytes_read) / 1e6 / static_cast<double>(t.generated_tokens) : 0.0,
                t.interrupted ? ", interrupted" : t.context_full ? ", context full" : "");
  return b;
}

void print_totals(const ChatTotals& s) {
  const uint64_t lookups = s.hits + s.misses;
  std::printf("decode: %lld tokens in %.2f s, %s tok/s; prefill: %lld tokens, %s tok/s\n"
              "expert cache: hit rate %.1f%%, %.1f MB/token read, disk %.2f GB/s during decode\n",
              static_cast<long long>(s.generated), s.decode_seconds, rate(static_cast<double>(s.generated), s.decode_seconds).c_str(),
              static_cast<long long>(s.prefilled), rate(static_cast<double>(s.prefilled), s.prefill_seconds).c_str(),
              lookups ? 100.0 * static_cast<double>(s.hits) / static_cast<double>(lookups) : 100.0,
              s.generated ? static_cast<double>(s.bytes) / 1e6 / static_cast<double>(s.generated) : 0.0,
              s.decode_seconds > 0 ? static_cast<double>(s.bytes) / 1e9 / s.decode_seconds : 0.0);
}

// One line from stdin without the newline; false at end of input or on Ctrl-C.
bool read_line(std::string& line) {
  line.clear();
  char buf[4096];
  for (;;) {
    if (!std::fgets(buf, sizeof buf, stdin)) {
      std::clearerr(stdin);
      return false;
    }
    line += buf;
    if (!line.empty() && line.back() == '\n') {
      line.pop_back();
      return true;
    }
  }
}

// read_line on rank 0; with expert parallelism the line (or the end of input) goes to every rank.
bool next_line(core::ExpertParallel* ep, std::string& line) {
  if (!ep) return read_line(line);
  int64_t n = -1;
  if (ep->leader()) n = read_line(line) ? static_cast<int64_t>(line.size()) : -1;
  ep->broadcast_value(n);
  if (n < 0) return false;
  line.resize(static_cast<size_t>(n));
  ep->broadcast(std::as_writable_bytes(std::span<char>(line.data(), line.size())));
  return true;
}

}  // namespace

int cmd_chat(int argc, char** argv) {
  cxxopts::Options options("sluice chat", "Interactive chat; the KV cache is kept between turns. /stats, /reset, /quit; "
                                          "Ctrl-C stops an answer");
  options.add_options()
      ("system-prompt", "a system message to start the conversation with (llama.cpp: -sys)", cxxopts::value<std::string>())
      ("chat-template", "override tokenizer.chat_template: chatml, a Jinja file, or Jinja text", cxxopts::value<std::string>()->default_value(""))
      ("n,n-predict", "most tokens per answer (-1: until the end of the turn or a full context)", cxxopts::value<int64_t>()->default_value("-1"))
      ("t,threads", "worker threads", cxxopts::value<unsigned>()->default_value("1"))
      ("c,ctx-size", "context length (0: min(training context, 4096))", cxxopts::value<int64_t>()->default_value("0"))
      ("b,batch-size", "most prompt tokens per forward pass", cxxopts::value<int64_t>()->default_value("512"))
      ("special-in-content", "tokenize control-token texts typed in a message as control tokens (default: as text, so typing one cannot open a new role)")
      ("h,help", "show this help");
  add_engine_flags(options, {});
  add_sampling_flags(options);
  add_expert_parallel_option(options);
  LlamaArgv llama_argv(argc, argv);
  auto args = options.parse(llama_argv.argc(), llama_argv.argv());
  if (args.count("help")) {
    std::cout << options.help();
    return 0;
  }
  if (!args.count("model")) throw Error(ErrorCode::invalid_argument, "-m MODEL.gguf is required");
  const std::string model_path = args["model"].as<std::string>();
  const SessionFlags sf = read_session_flags(args);
  for (const auto& note : sf.notes) std::fprintf(stderr, "sluice chat: %s\n", note.c_str());

  core::EngineOptions eo = read_engine_flags(args, {}, sf);
  eo.session.n_logit_rows = 1;  // a turn samples from its last row only
  const core::SamplerOptions sampling = read_sampling_flags(args);

  const std::unique_ptr<core::ExpertParallel> ep = join_expert_parallel(args, eo);
  quiet_follower_stdout(ep.get());
  core::Engine engine(eo);
  for (const auto& notice : engine.notices()) std::fprintf(stderr, "sluice chat: %s\n", notice.c_str());
  const core::Tokenizer tokenizer = core::Tokenizer::from_gguf(engine.gguf());
  const core::ChatTemplate chat = core::ChatTemplate::for_model(engine.gguf(), tokenizer, args["chat-template"].as<std::string>());
  if (!chat.notice().empty()) std::fprintf(stderr, "sluice chat: %s\n", chat.notice().c_str());
  std::fprintf(stderr, "sluice chat: %s\nsluice chat: %s\nsluice chat: chat template %s; /stats, /reset, /quit; Ctrl-C stops an answer\n",
               engine.describe_model().c_str(), engine.describe_budget().c_str(), chat.name().c_str());

  core::ChatSession session(engine, tokenizer, chat, sampling, args.count("special-in-content") > 0);
  if (args.count("system-prompt")) session.set_system(args["system-prompt"].as<std::string>());
  struct sigaction sa{};
  sa.sa_handler = on_sigint;  // no SA_RESTART: Ctrl-C at the prompt ends the read
  sigemptyset(&sa.sa_mask);
  if (!ep) sigaction(SIGINT, &sa, nullptr);

  ChatTotals totals;
  const int64_t max_tokens = args["n-predict"].as<int64_t>();
  std::string line;
  for (;;) {
    std::printf("> ");
    std::fflush(stdout);
    g_interrupted.store(false);
    if (!next_line(ep.get(), line)) {
      std::printf("\n");
      break;
    }
    if (line.empty()) continue;
    if (line == "/quit" || line == "/exit") break;
    if (line == "/reset") {
      session.reset();
      std::printf("(conversation cleared)\n");
      continue;
    }
    if (line == "/stats") {
      print_totals(totals);
      continue;
    }
    try {
      const core::ChatTurnStats t = session.say(line, max_tokens, [](const std::string& piece) {
        std::fputs(piece.c_str(), stdout);
        std::fflush(stdout);
      }, g_interrupted);
      totals.add(t);
      std::printf("\n%s\n", turn_line(t).c_str());
    } catch (const Error& e) {
      if (e.code() != ErrorCode::invalid_argument) throw;
      std::printf("(%s)\n", e.what());  // a conversation past the context: the user can /reset
    }
  }
  return 0;
}

}  // namespace sluice::tools
