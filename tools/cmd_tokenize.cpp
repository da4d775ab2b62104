// sluice tokenize MODEL.gguf TEXT: the token ids llama_tokenize gives for TEXT with the model's
// vocabulary, optionally with each token's piece.
#include <cstdio>
#include <iostream>
#include <sstream>

#include <cxxopts.hpp>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "core/gguf/gguf.h"
#include "core/text/tokenizer.h"
#include "io/pread_reader.h"
#include "tools/commands.h"

namespace sluice::tools {

namespace {

// A piece as a C-style quoted string: printable ASCII as is, everything else escaped, so that
// partial UTF-8 sequences and control bytes stay visible.
std::string quoted(const std::string& bytes) {
  std::string out = "'";
  for (char c : bytes) {
    const auto b = static_cast<unsigned char>(c);
    if (c == '\\' || c == '\'') {
      out += '\\';
      out += c;
    } else if (b >= 0x20 && b < 0x7F) {
      out += c;
    } else {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "\\x%02x", b);
      out += hex;
    }
  }
  return out + "'";
}

std::string read_all(std::istream& in) {
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

int cmd_tokenize(int argc, char** argv) {
  cxxopts::Options options("sluice tokenize", "Print the token ids of a text, as llama_tokenize gives them");
  options.add_options()
      ("model", "GGUF file", cxxopts::value<std::string>())
      ("text", "text to tokenize ('-' or absent: read standard input)", cxxopts::value<std::string>())
      ("no-special", "do not add BOS/EOS (add_special = false)")
      ("parse-special", "match control-token texts such as <|im_end|> as single tokens")
      ("pieces", "print one token per line with its piece")
      ("json", "print JSON: tokens, pieces (lossy UTF-8) and pieces_hex")
      ("h,help", "show this help");
  options.parse_positional({"model", "text"});
  options.positional_help("MODEL.gguf [TEXT]");
  auto args = options.parse(argc, argv);
  if (args.count("help")) {
    std::cout << options.help();
    return 0;
  }
  if (!args.count("model")) {
    throw Error(ErrorCode::invalid_argument, "missing MODEL.gguf (usage: sluice tokenize MODEL.gguf [TEXT])");
  }
  const std::string text = args.count("text") && args["text"].as<std::string>() != "-"
                               ? args["text"].as<std::string>()
                               : read_all(std::cin);

  io::PreadReader reader(args["model"].as<std::string>());
  const core::Tokenizer tok = core::Tokenizer::from_gguf(core::GgufFile::parse(reader));
  const std::vector<int32_t> ids = tok.encode(text, !args.count("no-special"), args.count("parse-special") > 0);

  if (args.count("json")) {
    nlohmann::json j;
    j["tokens"] = ids;
    nlohmann::json pieces = nlohmann::json::array(), hex = nlohmann::json::array();
    for (int32_t id : ids) {
      const std::string piece = tok.token_to_piece(id);
      pieces.push_back(piece);
      std::string h;
      for (char c : piece) {
        char buf[3];
        std::snprintf(buf, sizeof(buf), "%02x", static_cast<unsigned char>(c));
        h += buf;
      }
      hex.push_back(h);
    }
    j["pieces"] = pieces;
    j["pieces_hex"] = hex;
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else if (args.count("pieces")) {
    for (int32_t id : ids) std::cout << id << "\t" << quoted(tok.token_to_piece(id)) << "\n";
  } else {
    for (size_t i = 0; i < ids.size(); ++i) std::cout << (i ? " " : "") << ids[i];
    std::cout << "\n";
  }
  return 0;
}

}  // namespace sluice::tools
