#include "tools/serve_logprobs.h"

#include <algorithm>

namespace sluice::tools {

namespace {

using nlohmann::ordered_json;

ordered_json bytes_of(const std::string& piece) {
  ordered_json out = ordered_json::array();
  for (char c : piece) out.push_back(static_cast<int>(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

void LogprobsWriter::add(const core::TokenLogprob& lp) {
  ++n_;
  const std::string piece = tokenizer_.token_to_piece(lp.token, true);
  const int n_top = std::min(n_top_, lp.n_top);
  if (chat_) {
    ordered_json top = ordered_json::array();
    for (int k = 0; k < n_top; ++k) {
      const core::TopLogprob& t = lp.top[static_cast<size_t>(k)];
      const std::string p = tokenizer_.token_to_piece(t.token, true);
      top.push_back({{"token", p}, {"logprob", t.logprob}, {"bytes", bytes_of(p)}});
    }
    content_.push_back({{"token", piece}, {"logprob", lp.logprob}, {"bytes", bytes_of(piece)}, {"top_logprobs", std::move(top)}});
    return;
  }
  ordered_json top = ordered_json::object();
  for (int k = 0; k < n_top; ++k) {
    const core::TopLogprob& t = lp.top[static_cast<size_t>(k)];
    const std::string p = tokenizer_.token_to_piece(t.token, true);
    if (!top.contains(p)) top[p] = t.logprob;  // two tokens with one text: the likelier one
  }
  tokens_.push_back(piece);
  values_.push_back(lp.logprob);
  tops_.push_back(std::move(top));
  offsets_.push_back(text_offset_);
  text_offset_ += tokenizer_.token_to_piece(lp.token, false).size();
}

ordered_json LogprobsWriter::take() {
  n_ = 0;
  if (chat_) {
    ordered_json out = {{"content", std::move(content_)}};
    content_ = ordered_json::array();
    return out;
  }
  ordered_json out = {{"tokens", std::move(tokens_)}, {"token_logprobs", std::move(values_)},
                      {"top_logprobs", std::move(tops_)}, {"text_offset", std::move(offsets_)}};
  tokens_ = values_ = tops_ = offsets_ = ordered_json::array();
  return out;
}

}  // namespace sluice::tools
