// `sluice run` for kimi-k3: load, tokenize, prompt in n_batch chunks, sample, stream text.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>

#include "common/error.h"
#include "common/units.h"
#include "core/gguf.h"
#include "core/kimi_k3_model.h"
#include "core/kimi_k3_session.h"
#include "core/sampler.h"
#include "core/tokenizer.h"
#include "io/pread_reader.h"
#include "kernels/thread_pool.h"
#include "tools/run_kimi_k3.h"

namespace sluice::tools {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
}  // namespace

bool is_kimi_k3_file(const std::string& path) {
  io::PreadReader reader(path);
  return core::GgufFile::parse(reader).architecture() == "kimi-k3";
}

int run_kimi_k3(const cxxopts::ParseResult& args) {
  const auto t_load = Clock::now();
  const auto model = core::KimiK3Model::load(args["model"].as<std::string>(),
                                             {.widen_f16_to_f32 = args.count("widen-f16") > 0});
  const core::KimiK3Config& cfg = model->config();
  std::optional<core::Tokenizer> tokenizer;
  try {
    tokenizer = core::Tokenizer::from_gguf(model->gguf());
  } catch (const Error&) {
    if (args.count("prompt")) throw;
  }
  std::fprintf(stderr, "sluice run: %s\nsluice run: %s of weights loaded in %.2f s\n", cfg.describe().c_str(),
               human_bytes(model->weight_bytes()).c_str(), seconds_since(t_load));

  std::vector<int32_t> prompt;
  if (args.count("tokens")) {
    const std::string text = args["tokens"].as<std::string>();
    for (size_t i = 0; i < text.size();) {
      size_t j = text.find(',', i);
      if (j == std::string::npos) j = text.size();
      const std::string item = text.substr(i, j - i);
      size_t used = 0;
      long v = -1;
      try {
        v = std::stol(item, &used);
      } catch (const std::exception&) {
      }
      if (used != item.size() || v < 0 || v > INT32_MAX)
        throw Error(ErrorCode::invalid_argument, "--tokens: '" + item + "' is not a token id");
      prompt.push_back(static_cast<int32_t>(v));
      i = j + 1;
    }
  } else {
    prompt = tokenizer->encode(args["prompt"].as<std::string>(), true, false);
  }
  if (prompt.empty()) throw Error(ErrorCode::invalid_argument, "the prompt has no tokens");

  const unsigned threads = args["threads"].as<unsigned>();
  kernels::ThreadPool pool(threads);
  core::KimiK3InCoreExperts experts(*model);
  const int64_t n_ctx_opt = args["ctx-size"].as<int64_t>();
  const int64_t n_ctx = n_ctx_opt > 0 ? n_ctx_opt : std::min<int64_t>(cfg.n_ctx_train, 4096);
  if (static_cast<int64_t>(prompt.size()) > n_ctx)
    throw Error(ErrorCode::invalid_argument, "prompt of " + std::to_string(prompt.size()) +
                                                 " tokens is longer than the context of " + std::to_string(n_ctx) +
                                                 " tokens (raise -c)");
  const int64_t n_batch = std::max<int64_t>(1, std::min(args["batch-size"].as<int64_t>(), n_ctx));
  const bool kv_f32 = args["kv-type"].as<std::string>() == "f32";
  core::KimiK3Session session(*model, experts, pool,
                              {.n_ctx = n_ctx, .n_batch = n_batch, .kv_type = kv_f32 ? GgmlType::F32 : GgmlType::F16});
  std::fprintf(stderr, "sluice run: recurrent state %s, MLA cache %s, scratch %s\n",
               human_bytes(session.recurrent_state_bytes()).c_str(), human_bytes(session.kv_cache_bytes()).c_str(),
               human_bytes(session.scratch_bytes()).c_str());
  core::Sampler sampler({.temperature = args["temp"].as<float>(),
                         .top_k = args["top-k"].as<int>(),
                         .top_p = args["top-p"].as<float>(),
                         .min_p = args["min-p"].as<float>(),
                         .repeat_penalty = args["repeat-penalty"].as<float>(),
                         .repeat_last_n = args["repeat-last-n"].as<int>(),
                         .seed = args["seed"].as<uint64_t>()},
                        cfg.n_vocab);

  std::ofstream logits_out;
  if (args.count("logits-out")) {
    logits_out.open(args["logits-out"].as<std::string>(), std::ios::binary | std::ios::trunc);
    if (!logits_out)
      throw Error(ErrorCode::io_error, "cannot write --logits-out '" + args["logits-out"].as<std::string>() + "'");
  }
  auto write_rows = [&](std::span<const float> rows) {
    if (!logits_out.is_open()) return;
    logits_out.write(reinterpret_cast<const char*>(rows.data()), static_cast<std::streamsize>(rows.size_bytes()));
    if (!logits_out) throw Error(ErrorCode::io_error, "write to --logits-out failed");
  };

  if (tokenizer && args.count("prompt")) {
    for (int32_t id : prompt) std::fputs(tokenizer->token_to_piece(id, false).c_str(), stdout);
    std::fflush(stdout);
  }
  const auto t_prompt = Clock::now();
  std::vector<float> last(static_cast<size_t>(cfg.n_vocab));
  for (size_t i = 0; i < prompt.size(); i += static_cast<size_t>(n_batch)) {
    const size_t n = std::min(prompt.size() - i, static_cast<size_t>(n_batch));
    auto rows = session.forward({prompt.data() + i, n}, static_cast<int64_t>(i), logits_out.is_open());
    write_rows(rows);
    if (i + n == prompt.size()) std::copy(rows.end() - cfg.n_vocab, rows.end(), last.begin());
  }
  const double prompt_s = seconds_since(t_prompt);
  for (int32_t id : prompt) sampler.accept(id);

  const int n_predict = args["n-predict"].as<int>();
  const auto t_gen = Clock::now();
  int generated = 0;
  int64_t pos = static_cast<int64_t>(prompt.size());
  for (; generated < n_predict; ++generated) {
    const int32_t tok = sampler.sample(last);
    sampler.accept(tok);
    if (tokenizer) std::fputs(tokenizer->token_to_piece(tok, false).c_str(), stdout);
    else std::printf("%s%d", generated ? " " : "", tok);
    std::fflush(stdout);
    if (tokenizer && tok == tokenizer->eos() && !args.count("ignore-eos")) {
      ++generated;
      break;
    }
    if (pos >= session.n_ctx()) {
      std::fprintf(stderr, "\nsluice run: context of %lld tokens is full\n", static_cast<long long>(session.n_ctx()));
      ++generated;
      break;
    }
    auto row = session.forward({&tok, 1}, pos++);
    write_rows(row);
    std::copy(row.begin(), row.end(), last.begin());
  }
  const double gen_s = seconds_since(t_gen);
  std::printf("\n");
  std::fprintf(stderr, "sluice run: prompt %zu tokens in %.3f s (%.1f tok/s), generated %d tokens in %.3f s (%.1f tok/s)\n",
               prompt.size(), prompt_s, prompt.size() / std::max(prompt_s, 1e-9), generated, gen_s,
               generated / std::max(gen_s, 1e-9));
  return 0;
}

}  // namespace sluice::tools
