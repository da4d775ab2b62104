#include "core/text/chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "core/gguf/gguf.h"
#include "core/text/tokenizer.h"

namespace sluice::core {

namespace {

constexpr std::string_view kChatml =
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}";

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorCode::invalid_argument, "cannot read chat template file '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

std::string_view builtin_chat_template(std::string_view name) {
  if (name == "chatml") return kChatml;
  return {};
}

ChatTemplate::ChatTemplate(std::string_view source, std::string bos, std::string eos, bool strip_bos, bool strip_eos)
    : tmpl_(std::make_shared<jinja::Template>(source)),
      source_(source),
      bos_(std::move(bos)),
      eos_(std::move(eos)),
      strip_bos_(strip_bos),
      strip_eos_(strip_eos) {}

ChatTemplate ChatTemplate::for_model(const GgufFile& gguf, const Tokenizer& tokenizer, std::string_view spec) {
  std::string source, name, notice;
  if (!spec.empty()) {
    if (!builtin_chat_template(spec).empty()) {
      source = builtin_chat_template(spec);
      name = std::string(spec);
    } else if (spec.find("{{") != std::string_view::npos || spec.find("{%") != std::string_view::npos) {
      source = spec;
      name = "inline";
    } else if (std::filesystem::is_regular_file(std::string(spec))) {
      source = read_all(std::string(spec));
      name = std::string(spec);
    } else {
      throw Error(ErrorCode::invalid_argument, "--chat-template '" + std::string(spec) +
                                                   "' is not a built-in name (chatml), a file, or Jinja text");
    }
  } else {
    if (gguf.has("tokenizer.chat_template")) {
      source = gguf.get_string("tokenizer.chat_template");
      name = "tokenizer.chat_template";
    } else {  // as llama-server does: chatml, with a warning
      source = builtin_chat_template("chatml");
      name = "chatml";
      notice = "the model has no tokenizer.chat_template; using chatml (--chat-template overrides)";
    }
  }
  auto text = [&](int32_t id) { return id == kNullToken ? std::string() : std::string(tokenizer.token_text(id)); };
  ChatTemplate t(source, text(tokenizer.bos()), text(tokenizer.eos()), tokenizer.add_bos(), tokenizer.add_eos());
  t.name_ = name;
  t.notice_ = notice;
  try {
    t.apply(nlohmann::ordered_json::array({{{"role", "user"}, {"content", "hello"}}}), true);
  } catch (const Error& e) {
    throw Error(e.code(), std::string("chat template (") + name + ") cannot be rendered: " + e.what() +
                              "; give --chat-template chatml (or a Jinja file)");
  }
  return t;
}

std::string ChatTemplate::apply(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                const nlohmann::ordered_json& extra) const {
  nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
  ctx["messages"] = messages;
  ctx["add_generation_prompt"] = add_generation_prompt;
  ctx["bos_token"] = bos_;
  ctx["eos_token"] = eos_;
  for (auto it = extra.begin(); it != extra.end(); ++it) ctx[it.key()] = it.value();
  std::string out = tmpl_->render(ctx);
  if (strip_bos_ && !bos_.empty() && out.compare(0, bos_.size(), bos_) == 0) out.erase(0, bos_.size());
  if (strip_eos_ && !eos_.empty() && out.size() >= eos_.size() &&
      out.compare(out.size() - eos_.size(), eos_.size(), eos_) == 0)
    out.erase(out.size() - eos_.size());
  return out;
}

}  // namespace sluice::core
