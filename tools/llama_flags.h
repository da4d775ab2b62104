// llama.cpp's flag spellings, accepted where the meaning is the same (README: "llama.cpp's
// flags"), so commands typed for llama-cli, llama-server or llama-perplexity work here.
//
// cxxopts reads "-ctk" as the short flags -c -t -k, so llama.cpp's single-dash multi-letter
// flags are rewritten to long names before parsing (LlamaArgv):
//   -ctk -> --cache-type-k   -ctv -> --cache-type-v   -np -> --parallel
//   -sys -> --system-prompt  -no-cnv -> --no-cnv
// The rest are plain aliases declared on the options themselves (-f/--file, -s/--seed,
// --n-predict, --ctx-size, --batch-size, --threads).
//
// sluice keeps keys and values in one cache type (--kv-type); llama.cpp's -ctk/-ctv are taken
// when they name the same type (or one of them is given and equals the other's default, f16).
#pragma once

#include <string>
#include <vector>

#include <cxxopts.hpp>

#include "common/ggml_type.h"

namespace sluice::tools {

class LlamaArgv {
 public:
  LlamaArgv(int argc, char** argv);
  int argc() const { return static_cast<int>(ptrs_.size()) - 1; }
  char** argv() { return ptrs_.data(); }

 private:
  std::vector<std::string> args_;
  std::vector<char*> ptrs_;
};

// --kv-type plus llama.cpp's --cache-type-k/-ctk and --cache-type-v/-ctv.
void add_kv_type_options(cxxopts::Options& options);
// F16 or F32; Error(invalid_argument) naming the flags for another type or K != V.
GgmlType kv_type_from(const cxxopts::ParseResult& args);

}  // namespace sluice::tools
