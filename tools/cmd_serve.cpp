// sluice serve -m MODEL.gguf --budget SIZE [--host 127.0.0.1] [--port 8080] [--parallel N]:
// the OpenAI HTTP API (chat and text completions, streaming as server-sent events, models,
// health, metrics) over one Engine whose requests run together by continuous batching
// (app/serve_scheduler.h). HTTP comes from the front in tools/http/ (bounded connections,
// deadlines and body limits; see tools/http/server.h), JSON from nlohmann-json.
#include <charconv>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string_view>
#include <span>
#include <thread>

#include <cxxopts.hpp>

#include "common/error.h"
#include "common/units.h"
#include "core/text/chat_prompt.h"
#include "core/text/chat_template.h"
#include "core/engine.h"
#include "core/gguf/gguf.h"
#include "app/serve_scheduler.h"
#include "app/text_stream.h"
#include "core/text/tokenizer.h"
#include "tools/commands.h"
#include "tools/engine_flags.h"
#include "tools/expert_parallel_flag.h"
#include "tools/llama_flags.h"
#include "tools/session_flags.h"
#include "tools/memory_flags.h"
#include "tools/web/chat_page.h"
#include "tools/http/server.h"
#include "tools/serve_api.h"
#include "tools/serve_logprobs.h"
#include "tools/serve_tool_calls.h"
#include "tools/verify_flag.h"
#include "io/fault_reader.h"
#include "io/pread_reader.h"

namespace sluice::tools {

namespace {

using nlohmann::ordered_json;
using namespace std::chrono_literals;

struct Server {
  core::Engine* engine = nullptr;
  core::Scheduler* scheduler = nullptr;
  const core::Tokenizer* tokenizer = nullptr;
  const core::ChatTemplate* chat = nullptr;
  std::string model_id, model_file;
  int64_t created = 0;
  bool special_in_content = false;  // --special-in-content: message text may spell control tokens
  core::ToolSyntax tool_syntax = core::ToolSyntax::json;  // the chat template's (app/tool_calls.h)
  ToolGrammar tool_grammar;                                // how a forced call is written
  const ToolPieces* pieces = nullptr;
  std::vector<int32_t> test_reply;  // --test-reply: every request's reply, as tokens
  std::atomic<uint64_t> next_id{1};
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
};

http::Reply error_reply(int status, const std::string& message) {
  return {status, "application/json", dump(error_body(status, message)), {}};
}

std::string event(const ordered_json& j) { return "data: " + dump(j) + "\n\n"; }

ordered_json chunk(const Server& s, const std::string& id, bool chat, const ordered_json& delta_or_text,
                   const char* finish) {
  ordered_json choice = {{"index", 0}};
  if (chat) choice["delta"] = delta_or_text;
  else choice["text"] = delta_or_text;
  choice["finish_reason"] = finish ? ordered_json(finish) : ordered_json(nullptr);
  return {{"id", id}, {"object", chat ? "chat.completion.chunk" : "text_completion"}, {"created", s.created},
          {"model", s.model_id}, {"choices", ordered_json::array({choice})}};
}

// "cancelled": the server cut the request short at shutdown (not an OpenAI value; clients
// that switch on finish_reason see an unknown one rather than a false "length").
const char* finish_name(core::FinishReason r, bool stopped_by_string) {
  if (stopped_by_string) return "stop";
  if (r == core::FinishReason::cancelled) return "cancelled";
  return r == core::FinishReason::length ? "length" : "stop";
}

ordered_json usage(const core::Generation& gen, int64_t n_generated) {
  return usage_body(gen.prompt_tokens(), gen.cached_tokens(), n_generated);
}

// --test-reply (tests only): the model's tokens are replaced, one for one, by the reply's; the
// request ends when they run out. It lets the tool-call tests force a reply a tiny random model
// would never write.
struct ForcedReply {
  std::span<const int32_t> tokens;
  size_t next = 0;
};

// Waits for the next tokens (and their log-probabilities, when asked), ending the request early
// when the client is gone, a stop string appeared, or the server's shutdown grace is over.
// Returns true once the request is done.
bool next_tokens(core::Generation& gen, http::Responder& out, const core::TextStream& text, std::vector<int32_t>& toks,
                 std::vector<core::TokenLogprob>& logprobs, std::chrono::milliseconds wait, ForcedReply& forced) {
  toks.clear();
  logprobs.clear();
  const bool done = gen.wait(toks, logprobs, wait);
  if (!forced.tokens.empty()) {
    size_t kept = 0;
    for (size_t i = 0; i < toks.size() && forced.next < forced.tokens.size(); ++i) toks[kept++] = forced.tokens[forced.next++];
    toks.resize(kept);
    logprobs.resize(std::min(logprobs.size(), kept));
    if (forced.next == forced.tokens.size() && !done) gen.end_early();
  }
  if (!done) {
    if (text.stopped()) gen.end_early();
    else if (out.client_gone() || out.cut_now()) gen.cancel();
  }
  return done;
}


void generate_whole(Server& s, core::Generation& gen, core::TextStream& stream, http::Responder& out, const std::string& id,
                    const ApiRequest& r) {
  const bool chat = r.chat;
  std::vector<int32_t> toks;
  std::vector<core::TokenLogprob> logprobs;
  LogprobsWriter lp(*s.tokenizer, chat, r.top_logprobs);
  ForcedReply forced{s.test_reply};
  int64_t n_generated = 0;
  for (;;) {
    const bool done = next_tokens(gen, out, stream, toks, logprobs, 100ms, forced);
    n_generated += static_cast<int64_t>(toks.size());
    for (int32_t t : toks) stream.push(s.pieces->piece(t, r.parse_tools));
    for (const core::TokenLogprob& x : logprobs) lp.add(x);
    if (done) break;
  }
  stream.flush();
  if (gen.finish_reason() == core::FinishReason::error) return out.send(error_reply(500, gen.error()));
  if (gen.finish_reason() == core::FinishReason::cancelled && !stream.stopped())
    return out.send(error_reply(503, out.stopping() ? "the server is shutting down; the request was cut short"
                                                    : "the request was cancelled"));
  const char* finish = finish_name(gen.finish_reason(), stream.stopped());
  ordered_json choice = {{"index", 0}};
  if (chat) choice["message"] = {{"role", "assistant"}, {"content", stream.text()}};
  else choice["text"] = stream.text();
  if (r.parse_tools) {
    const core::ToolCallResult calls = core::parse_tool_calls(s.tool_syntax, stream.text());
    if (calls.found) {
      choice["message"]["content"] = calls.content.empty() ? ordered_json(nullptr) : ordered_json(calls.content);
      choice["message"]["tool_calls"] = tool_calls_json(calls.calls, id, false);
      finish = "tool_calls";
    }
  }
  choice["logprobs"] = r.top_logprobs >= 0 ? lp.take() : ordered_json(nullptr);
  choice["finish_reason"] = finish;
  ordered_json body = {{"id", id}, {"object", chat ? "chat.completion" : "text_completion"}, {"created", s.created},
                       {"model", s.model_id}, {"choices", ordered_json::array({choice})},
                       {"usage", usage(gen, n_generated)}};
  out.send({200, "application/json", dump(body), {}});
}

// Server-sent events; a write that fails (client gone) cancels the request. Every stream that
// still has a client ends with a final chunk (finish_reason), with include_usage a usage chunk
// (empty choices), and [DONE], also when cut at shutdown.
void generate_stream(Server& s, core::Generation& gen, core::TextStream& stream, http::Responder& out,
                     const std::string& id, const ApiRequest& r) {
  const bool chat = r.chat;
  auto write = [&](const std::string& data) {
    if (out.write(data)) return true;
    gen.cancel();
    return false;
  };
  if (!out.begin_stream("text/event-stream", {{"Cache-Control", "no-cache"}})) return gen.cancel();
  const ordered_json first = chat ? ordered_json{{"role", "assistant"}, {"content", ""}} : ordered_json("");
  if (!write(event(chunk(s, id, chat, first, nullptr)))) return;
  std::vector<int32_t> toks;
  std::vector<core::TokenLogprob> logprobs;
  LogprobsWriter lp(*s.tokenizer, chat, r.top_logprobs);
  ForcedReply forced{s.test_reply};
  core::ToolCallStream calls(s.tool_syntax);
  core::ToolCallResult parsed;
  int64_t n_generated = 0;
  auto idle_since = std::chrono::steady_clock::now();
  for (;;) {
    const bool done = next_tokens(gen, out, stream, toks, logprobs, 100ms, forced);
    n_generated += static_cast<int64_t>(toks.size());
    std::string text;
    for (int32_t t : toks) text += stream.push(s.pieces->piece(t, r.parse_tools));
    for (const core::TokenLogprob& x : logprobs) lp.add(x);
    if (done) text += stream.flush();
    if (r.parse_tools) {  // text that may be a tool call is held back until the reply ends
      text = calls.push(text);
      if (done) {
        parsed = calls.finish();
        text += parsed.content;  // malformed calls come back as text
      }
    }
    if (!text.empty() || !lp.empty()) {
      const ordered_json d = chat ? ordered_json{{"content", text}} : ordered_json(text);
      ordered_json c = chunk(s, id, chat, d, nullptr);
      if (!lp.empty()) c["choices"][0]["logprobs"] = lp.take();
      if (!write(event(c))) return;
      idle_since = std::chrono::steady_clock::now();
    } else if (!done && std::chrono::steady_clock::now() - idle_since > 1s) {
      if (!write(": keep-alive\n\n")) return;  // finds a vanished client while queued
      idle_since = std::chrono::steady_clock::now();
    }
    if (done) break;
  }
  if (gen.finish_reason() == core::FinishReason::error) {
    write(event(error_body(500, gen.error())));
  } else {
    const ordered_json d = chat ? ordered_json::object() : ordered_json("");
    const char* finish = finish_name(gen.finish_reason(), stream.stopped());
    if (parsed.found) {
      finish = "tool_calls";
      if (!write(event(chunk(s, id, chat, {{"tool_calls", tool_calls_json(parsed.calls, id, true)}}, nullptr)))) return;
    }
    if (!write(event(chunk(s, id, chat, d, finish)))) return;
    if (r.include_usage) {
      ordered_json u = chunk(s, id, chat, d, nullptr);
      u["choices"] = ordered_json::array();
      u["usage"] = usage(gen, n_generated);
      if (!write(event(u))) return;
    }
  }
  write("data: [DONE]\n\n");
  out.end_stream();
}

void handle_generate(Server& s, const http::Request& req, http::Responder& out, bool chat) {
  ApiError err{400, ""};
  std::optional<ApiRequest> r = parse_request(req.body, chat, err, s.tool_grammar);
  if (!r) return out.send(error_reply(err.status, err.message));
  if (!r->model.empty() && r->model != s.model_id && r->model != s.model_file)
    return out.send(error_reply(404, "model '" + r->model + "' is not served here; this server has '" + s.model_id + "'"));
  if (out.stopping()) return out.send(error_reply(503, "the server is shutting down"));

  core::GenerationParams p;
  try {
    if (chat) {
      p.prompt = core::encode_chat_prompt(*s.chat, *s.tokenizer, r->messages, true, r->template_extra,
                                          s.special_in_content)
                     .tokens;
    } else if (!r->prompt_tokens.empty()) {
      p.prompt = r->prompt_tokens;
    } else {
      p.prompt = s.tokenizer->encode(r->prompt_text, true, true);
    }
    p.max_tokens = r->max_tokens;
    p.sampling = r->sampling;
    p.cache_prompt = r->cache_prompt;
    p.top_logprobs = r->top_logprobs;
    p.grammar = r->grammar;
    if (!s.test_reply.empty()) p.stop_at_eog = false;
    auto gen = s.scheduler->submit(std::move(p));
    if (!gen) return out.send(error_reply(503, "the queue is full; retry later"));
    const std::string id = std::string(chat ? "chatcmpl-" : "cmpl-") + std::to_string(s.next_id++);
    core::TextStream stream(r->stop);
    if (r->stream) generate_stream(s, *gen, stream, out, id, *r);
    else generate_whole(s, *gen, stream, out, id, *r);
  } catch (const Error& e) {
    if (!out.responded()) out.send(error_reply(e.code() == ErrorCode::invalid_argument ? 400 : 500, e.what()));
  }
}

// Prometheus text format (version 0.0.4): HELP and TYPE lines, counts as exact integers (a
// double with %.6g loses digits past a million), rates and seconds as shortest round-trip reals.
std::string metrics_text(Server& s) {
  const core::SchedulerMetrics m = s.scheduler->metrics();
  const double up = std::chrono::duration<double>(std::chrono::steady_clock::now() - s.started).count();
  std::string out;
  auto head = [&](const char* name, const char* help, const char* type) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  };
  auto count = [&](const char* name, const char* help, uint64_t v) {
    head(name, help, std::string_view(name).ends_with("_total") ? "counter" : "gauge");
    out += std::string(name) + " " + std::to_string(v) + "\n";
  };
  auto put = [&](const char* name, const char* help, double v) {
    head(name, help, std::string_view(name).ends_with("_total") ? "counter" : "gauge");
    char buf[64];
    const auto end = std::to_chars(buf, buf + sizeof buf, v).ptr;  // shortest text that reads back as v
    out += std::string(name) + " " + std::string(buf, end) + "\n";
  };
  const double lookups = static_cast<double>(m.cache_hits + m.cache_misses);
  count("sluice_requests_finished_total", "requests that ran to the end", m.requests_finished);
  count("sluice_requests_cancelled_total", "requests cancelled (client gone, or cut short at shutdown)", m.requests_cancelled);
  count("sluice_requests_rejected_total", "requests refused with 503 (queue full)", m.requests_rejected);
  count("sluice_requests_active", "requests holding a slot", m.active);
  count("sluice_queue_depth", "requests waiting for a slot", m.queue_depth);
  count("sluice_prompt_tokens_total", "prompt tokens admitted", m.prompt_tokens);
  count("sluice_prompt_tokens_cached_total", "prompt tokens reused from a slot's KV cache, not prefilled",
        m.prompt_tokens_cached);
  count("sluice_generated_tokens_total", "tokens generated", m.generated_tokens);
  count("sluice_steps_total", "batched forward passes", m.steps);
  count("sluice_decode_steps_total", "passes with decode tokens only", m.decode_steps);
  put("sluice_decode_batch_mean", "tokens per decode-only pass",
      m.decode_steps ? static_cast<double>(m.decode_tokens) / static_cast<double>(m.decode_steps) : 0);
  put("sluice_decode_tokens_per_second", "aggregate decode tok/s over decode-only passes",
      m.decode_seconds > 0 ? static_cast<double>(m.decode_tokens) / m.decode_seconds : 0);
  put("sluice_decode_bytes_read_per_token", "expert bytes read from disk per token in decode-only passes",
      m.decode_tokens ? static_cast<double>(m.decode_bytes_read) / static_cast<double>(m.decode_tokens) : 0);
  put("sluice_tokens_per_expert_read", "routed (token, expert) pairs per distinct expert, per MoE layer of decode passes",
      m.distinct_experts ? static_cast<double>(m.routed_pairs) / static_cast<double>(m.distinct_experts) : 0);
  count("sluice_decode_tokens_total", "tokens generated by decode-only passes", m.decode_tokens);
  put("sluice_decode_seconds_total", "time in decode-only passes", m.decode_seconds);
  count("sluice_decode_bytes_read_total", "expert bytes read during decode-only passes", m.decode_bytes_read);
  count("sluice_routed_pairs_total", "routed (token, expert) pairs in decode-only passes", m.routed_pairs);
  count("sluice_distinct_experts_total", "distinct experts per MoE layer, summed over decode-only passes", m.distinct_experts);
  put("sluice_cache_hit_rate", "expert cache hits / lookups", lookups > 0 ? static_cast<double>(m.cache_hits) / lookups : 0);
  count("sluice_cache_hits_total", "expert cache lookups that found the shard in RAM", m.cache_hits);
  count("sluice_cache_misses_total", "expert cache lookups that read the shard", m.cache_misses);
  count("sluice_cache_bytes_read_total", "bytes read into the expert cache", m.cache_bytes_read);
  put("sluice_uptime_seconds", "seconds since start", up);
  return out;
}

// --host, --port, --max-connections, --max-body, --header-timeout, checked; a worker for every
// active and queued request, plus a few for requests refused quickly (bad JSON, 404).
http::ServerOptions read_http_flags(const cxxopts::ParseResult& args, int64_t parallel, int64_t queue) {
  const int port = args["port"].as<int>();
  if (port < 0 || port > 65535) throw Error(ErrorCode::invalid_argument, "--port " + std::to_string(port) + " must be in [0, 65535]");
  const uint64_t max_body = parse_size(args["max-body"].as<std::string>(), "--max-body");
  if (max_body == 0 || max_body > (uint64_t{1} << 30))
    throw Error(ErrorCode::invalid_argument, "--max-body must be in [1, 1G]");
  const int64_t max_connections = args["max-connections"].as<int64_t>();
  if (max_connections < 1 || max_connections > 65536)
    throw Error(ErrorCode::invalid_argument, "--max-connections " + std::to_string(max_connections) + " must be in [1, 65536]");
  const double header_timeout = args["header-timeout"].as<double>();
  if (!(header_timeout >= 0.1 && header_timeout <= 3600))
    throw Error(ErrorCode::invalid_argument, "--header-timeout must be in [0.1, 3600] seconds");
  http::ServerOptions so;
  so.host = args["host"].as<std::string>();
  so.port = port;
  so.max_connections = static_cast<size_t>(max_connections);
  so.workers = static_cast<size_t>(parallel + queue + 4);
  so.limits.max_body = max_body;
  so.head_timeout = std::chrono::milliseconds(static_cast<int64_t>(header_timeout * 1000));
  return so;
}

// The OpenAI-compatible routes, /health, /metrics and the web chat page.
void add_routes(http::Server& svr, Server& s) {
  svr.get("/", [](const http::Request&) {
    return http::Reply{200, "text/html; charset=utf-8", std::string(chat_page_html()), {}};
  });
  svr.get("/health", [](const http::Request&) { return http::Reply{200, "application/json", R"({"status":"ok"})", {}}; });
  svr.get("/v1/models", [&s](const http::Request&) {
    ordered_json m = {{"object", "list"},
                      {"data", ordered_json::array({{{"id", s.model_id}, {"object", "model"}, {"created", s.created},
                                                     {"owned_by", "sluice"}}})}};
    return http::Reply{200, "application/json", dump(m), {}};
  });
  svr.get("/metrics", [&s](const http::Request&) {
    return http::Reply{200, "text/plain; version=0.0.4", metrics_text(s), {}};
  });
  svr.post("/v1/chat/completions", [&s](const http::Request& req, http::Responder& out) {
    handle_generate(s, req, out, true);
  });
  svr.post("/v1/completions", [&s](const http::Request& req, http::Responder& out) {
    handle_generate(s, req, out, false);
  });

}

}  // namespace

int cmd_serve(int argc, char** argv) {
  cxxopts::Options options("sluice serve", "OpenAI-compatible HTTP server with continuous batching");
  options.add_options()
      ("host", "address to listen on", cxxopts::value<std::string>()->default_value("127.0.0.1"))
      ("port", "port (0: any free port, printed at start)", cxxopts::value<int>()->default_value("8080"))
      ("parallel", "requests decoded together, each holding a KV cache of -c tokens (llama-server: -np)", cxxopts::value<int64_t>()->default_value("4"))
      ("queue", "requests that may wait for a slot; beyond that: 503", cxxopts::value<int64_t>()->default_value("16"))
      ("max-body", "largest request body (bytes, 1M = 1 MiB); beyond that: 413", cxxopts::value<std::string>()->default_value("1M"))
      ("max-connections", "open connections at most; beyond that: 503", cxxopts::value<int64_t>()->default_value("512"))
      ("header-timeout", "seconds a request head may take to arrive; beyond that: 408", cxxopts::value<double>()->default_value("5"))
      ("no-cache-prompt", "prefill every prompt whole (default: a prefix held in a slot's KV cache is reused)")
      ("chat-template", "override tokenizer.chat_template: chatml, a Jinja file, or Jinja text", cxxopts::value<std::string>()->default_value(""))
      ("special-in-content", "tokenize control-token texts in chat messages as control tokens (default: as text, so clients cannot inject role markers)")
      ("t,threads", "worker threads", cxxopts::value<unsigned>()->default_value("1"))
      ("c,ctx-size", "context per request (0: min(training context, 4096))", cxxopts::value<int64_t>()->default_value("0"))
      ("b,batch-size", "most tokens per forward pass (decode tokens + prompt chunk)", cxxopts::value<int64_t>()->default_value("512"))
      ("h,help", "show this help");
  options.add_options("testing")("test-reply", "testing: replace every request's generated tokens with this file's text (tokenized with special tokens)",
                                 cxxopts::value<std::string>());
  add_engine_flags(options, {.io_faults = true});
  add_expert_parallel_option(options);
  LlamaArgv llama_argv(argc, argv);
  auto args = options.parse(llama_argv.argc(), llama_argv.argv());
  if (args.count("help")) {
    std::cout << options.help({""});
    return 0;
  }
  if (!args.count("model")) throw Error(ErrorCode::invalid_argument, "-m MODEL.gguf is required");
  const std::string model_path = args["model"].as<std::string>();
  const int64_t parallel = args["parallel"].as<int64_t>();
  if (parallel < 1 || parallel > 256) throw Error(ErrorCode::invalid_argument, "--parallel " + std::to_string(parallel) + " must be in [1, 256]");
  const int64_t queue = args["queue"].as<int64_t>();
  if (queue < 0 || queue > 4096) throw Error(ErrorCode::invalid_argument, "--queue " + std::to_string(queue) + " must be in [0, 4096]");
  const http::ServerOptions so = read_http_flags(args, parallel, queue);
  const SessionFlags sf = read_session_flags(args);
  for (const auto& note : sf.notes) std::fprintf(stderr, "sluice serve: %s\n", note.c_str());

  core::EngineOptions eo = read_engine_flags(args, {.io_faults = true}, sf);
  eo.session.n_batch = std::max<int64_t>(parallel, sf.n_batch);
  eo.session.n_seq = parallel;
  eo.session.n_logit_rows = parallel;  // a step samples one row per slot at most

  // Signals go to one thread that stops the server; block them before any thread starts.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  // --expert-parallel: rank 0 serves HTTP and leads every batch step; the other ranks follow them.
  const std::unique_ptr<core::ExpertParallel> ep = join_expert_parallel(args, eo);
  core::Engine engine(eo);
  if (ep && !ep->leader()) {
    const uint64_t steps = ep->follow_steps(engine);
    std::fprintf(stderr, "sluice serve: rank %d followed %llu batch steps\n", ep->rank(), static_cast<unsigned long long>(steps));
    return 0;
  }
  for (const auto& notice : engine.notices()) std::fprintf(stderr, "sluice serve: %s\n", notice.c_str());
  const core::Tokenizer tokenizer = core::Tokenizer::from_gguf(engine.model().gguf());
  const core::ChatTemplate chat =
      core::ChatTemplate::for_model(engine.model().gguf(), tokenizer, args["chat-template"].as<std::string>());
  if (!chat.notice().empty()) std::fprintf(stderr, "sluice serve: %s\n", chat.notice().c_str());
  core::Scheduler scheduler(engine, tokenizer,
                            {.max_queue = queue, .parallel = ep.get(), .cache_prompt = !args.count("no-cache-prompt")});

  Server s;
  s.engine = &engine;
  s.scheduler = &scheduler;
  s.tokenizer = &tokenizer;
  s.chat = &chat;
  s.special_in_content = args.count("special-in-content") > 0;
  s.tool_syntax = core::tool_syntax_of(chat.source());
  const ToolPieces pieces(tokenizer, s.tool_syntax);
  // A forced call's markers are the vocabulary's own tokens where it has them (as the template's
  // rendering of a call tokenizes them), else their text.
  s.tool_grammar = {s.tool_syntax, [&tokenizer](std::string_view m) {
                      const int32_t id = tokenizer.find_token(m);
                      return id == core::kNullToken ? core::gbnf_literal(m) : "<[" + std::to_string(id) + "]>";
                    }};
  s.pieces = &pieces;
  if (args.count("test-reply")) {
    const std::string path = args["test-reply"].as<std::string>();
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error(ErrorCode::invalid_argument, "cannot read --test-reply '" + path + "'");
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    s.test_reply = tokenizer.encode(text, false, true);
    if (s.test_reply.empty()) throw Error(ErrorCode::invalid_argument, "--test-reply '" + path + "' has no tokens");
  }
  s.model_file = std::filesystem::path(model_path).filename().string();
  s.model_id = std::filesystem::path(model_path).stem().string();
  s.created = static_cast<int64_t>(std::time(nullptr));

  http::Server svr(so, [](int status, const std::string& message) { return dump(error_body(status, message)); });
  add_routes(svr, s);

  std::thread stopper([&svr, sigs] {
    int sig = 0;
    sigwait(&sigs, &sig);
    svr.stop();
  });
  const double mib = 1024.0 * 1024.0;
  std::fprintf(stderr, "sluice serve: %s\nsluice serve: %s\nsluice serve: chat template %s (tool calls: %s), %lld slots of %lld tokens\n",
               engine.describe_model().c_str(), engine.describe_budget().c_str(), chat.name().c_str(), core::to_string(s.tool_syntax),
               static_cast<long long>(parallel), static_cast<long long>(scheduler.n_ctx()));
  std::fprintf(stderr,
               "sluice serve: request memory outside the budget: at most %zu connections, each with a request "
               "body of --max-body %.1f MiB and a %zu KiB head (%.1f MiB); header timeout %.1f s\n",
               so.max_connections, static_cast<double>(so.limits.max_body) / mib, so.limits.max_head / 1024,
               static_cast<double>(so.max_connections) * (static_cast<double>(so.limits.max_body) + 2.0 * static_cast<double>(so.limits.max_head)) / mib,
               std::chrono::duration<double>(so.head_timeout).count());
  std::fprintf(stderr, "sluice serve: listening on http://%s:%d\n", so.host.c_str(), svr.port());
  std::fflush(stderr);
  svr.run();
  pthread_kill(stopper.native_handle(), SIGTERM);  // wakes the stopper if the server stopped on its own
  stopper.join();
  return 0;
}

}  // namespace sluice::tools
