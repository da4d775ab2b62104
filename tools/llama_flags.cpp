#include "tools/llama_flags.h"

#include <cstring>

#include "common/error.h"

namespace sluice::tools {

namespace {

struct Spelling {
  const char* llama;
  const char* sluice;
};
constexpr Spelling kSingleDash[] = {{"-ctk", "--cache-type-k"}, {"-ctv", "--cache-type-v"}, {"-np", "--parallel"},
                                    {"-sys", "--system-prompt"}, {"-no-cnv", "--no-cnv"}};

GgmlType kv_type_named(const std::string& name, const char* flag) {
  if (name == "f16") return GgmlType::F16;
  if (name == "f32") return GgmlType::F32;
  throw Error(ErrorCode::invalid_argument, std::string(flag) + " '" + name + "' must be f16 or f32 (sluice has no quantized KV cache)");
}

}  // namespace

LlamaArgv::LlamaArgv(int argc, char** argv) {
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    for (const Spelling& s : kSingleDash) {
      if (a == s.llama) a = s.sluice;
    }
    args_.push_back(std::move(a));
  }
  for (auto& a : args_) ptrs_.push_back(a.data());
  ptrs_.push_back(nullptr);
}

void add_kv_type_options(cxxopts::Options& options) {
  options.add_options()
      ("kv-type", "KV cache type: f16 or f32", cxxopts::value<std::string>()->default_value("f16"))
      ("cache-type-k", "llama.cpp's -ctk: the same as --kv-type (give -ctv the same type)", cxxopts::value<std::string>())
      ("cache-type-v", "llama.cpp's -ctv: the same as --kv-type (give -ctk the same type)", cxxopts::value<std::string>());
}

GgmlType kv_type_from(const cxxopts::ParseResult& args) {
  const bool k = args.count("cache-type-k") > 0, v = args.count("cache-type-v") > 0;
  if (!k && !v) return kv_type_named(args["kv-type"].as<std::string>(), "--kv-type");
  if (args.count("kv-type")) throw Error(ErrorCode::invalid_argument, "give --kv-type or -ctk/-ctv, not both");
  const GgmlType tk = k ? kv_type_named(args["cache-type-k"].as<std::string>(), "-ctk") : GgmlType::F16;
  const GgmlType tv = v ? kv_type_named(args["cache-type-v"].as<std::string>(), "-ctv") : GgmlType::F16;
  if (tk != tv)
    throw Error(ErrorCode::invalid_argument, "-ctk and -ctv name different types; sluice keeps keys and values in one type "
                                             "(--kv-type): give both the same");
  return tk;
}

}  // namespace sluice::tools
