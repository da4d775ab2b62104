#include "core/text/chat_prompt.h"

#include <algorithm>
#include <span>
#include <string_view>

#include "common/error.h"
#include "core/text/chat_template.h"
#include "core/text/tokenizer.h"

namespace sluice::core {

namespace {

using nlohmann::ordered_json;

// The texts that only parse_special cuts out (control and unknown tokens).
std::vector<std::string_view> control_texts(const Tokenizer& tokenizer) {
  std::vector<std::string_view> out;
  for (int32_t id : tokenizer.special_tokens())
    if (tokenizer.token_attrs(id) & (token_attr::kControl | token_attr::kUnknown))
      if (!tokenizer.token_text(id).empty()) out.push_back(tokenizer.token_text(id));
  return out;
}

std::string marked(const std::string& s, std::span<const std::string_view> controls, std::vector<size_t>& at) {
  if (s.find(kLiteralMark) != std::string::npos)
    throw Error(ErrorCode::invalid_argument,
                "a message carries U+FDD0, a Unicode noncharacter this server reserves; remove it");
  at.clear();
  for (std::string_view c : controls)
    for (size_t p = s.find(c); p != std::string::npos; p = s.find(c, p + 1)) at.push_back(p);
  if (at.empty()) return s;
  std::sort(at.begin(), at.end());
  at.erase(std::unique(at.begin(), at.end()), at.end());
  std::string out;
  out.reserve(s.size() + at.size() * kLiteralMark.size());
  size_t from = 0;
  for (size_t p : at) {
    out.append(s, from, p - from);
    out.append(kLiteralMark);
    from = p;
  }
  out.append(s, from);
  return out;
}

// A copy of `j` with every string (keys included) marked.
ordered_json marked(const ordered_json& j, std::span<const std::string_view> controls, std::vector<size_t>& at) {
  if (j.is_string()) return marked(j.get_ref<const std::string&>(), controls, at);
  if (j.is_array()) {
    ordered_json out = ordered_json::array();
    for (const auto& x : j) out.push_back(marked(x, controls, at));
    return out;
  }
  if (j.is_object()) {
    ordered_json out = ordered_json::object();
    for (auto it = j.begin(); it != j.end(); ++it) out[marked(it.key(), controls, at)] = marked(it.value(), controls, at);
    return out;
  }
  return j;
}

}  // namespace

ChatPrompt render_chat_prompt(const ChatTemplate& chat, const Tokenizer& tokenizer, const ordered_json& messages,
                              bool add_generation_prompt, const ordered_json& extra, bool special_in_content) {
  ChatPrompt p;
  if (special_in_content) {
    p.text = chat.apply(messages, add_generation_prompt, extra);
    return p;
  }
  const std::vector<std::string_view> controls = control_texts(tokenizer);
  std::vector<size_t> scratch;
  const std::string rendered =
      chat.apply(marked(messages, controls, scratch), add_generation_prompt, marked(extra, controls, scratch));
  p.text.reserve(rendered.size());
  size_t from = 0;
  for (size_t m = rendered.find(kLiteralMark); m != std::string::npos; m = rendered.find(kLiteralMark, from)) {
    p.text.append(rendered, from, m - from);
    p.literal_at.push_back(p.text.size());
    from = m + kLiteralMark.size();
  }
  p.text.append(rendered, from);
  return p;
}

ChatPrompt encode_chat_prompt(const ChatTemplate& chat, const Tokenizer& tokenizer, const ordered_json& messages,
                              bool add_generation_prompt, const ordered_json& extra, bool special_in_content) {
  ChatPrompt p = render_chat_prompt(chat, tokenizer, messages, add_generation_prompt, extra, special_in_content);
  // With special_in_content there are no literal offsets: encode_guarded is encode(text, true, true).
  p.tokens = tokenizer.encode_guarded(p.text, true, p.literal_at);
  return p;
}

}  // namespace sluice::core
