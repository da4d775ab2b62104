// The `logprobs` objects of serve's responses, from the scheduler's per-token log-probabilities
// (app/token_logprobs.h):
//   chat        {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob",
//               "bytes"}, ...]}, ...]}  (OpenAI's chat shape)
//   completions {"tokens": [...], "token_logprobs": [...], "top_logprobs": [{text: logprob}, ...],
//               "text_offset": [...]}  (the legacy completions shape; offsets into the generated text)
// A token's text is its piece with special tokens spelled out; "bytes" are its raw bytes (a piece
// may be part of a UTF-8 character; "token" then carries U+FFFD, "bytes" the truth).
// A stream takes the entries added since its last chunk; a whole response takes them all at once.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "app/token_logprobs.h"
#include "core/text/tokenizer.h"

namespace sluice::tools {

class LogprobsWriter {
 public:
  LogprobsWriter(const core::Tokenizer& tokenizer, bool chat, int n_top)
      : tokenizer_(tokenizer), chat_(chat), n_top_(n_top) {}
  void add(const core::TokenLogprob& lp);
  bool empty() const { return n_ == 0; }
  // The object for the entries added since the last take(), which are then cleared.
  nlohmann::ordered_json take();

 private:
  const core::Tokenizer& tokenizer_;
  bool chat_;
  int n_top_;
  size_t n_ = 0;
  size_t text_offset_ = 0;
  nlohmann::ordered_json content_ = nlohmann::ordered_json::array();           // chat
  nlohmann::ordered_json tokens_ = nlohmann::ordered_json::array(), values_ = nlohmann::ordered_json::array(),
                         tops_ = nlohmann::ordered_json::array(), offsets_ = nlohmann::ordered_json::array();
};

}  // namespace sluice::tools
