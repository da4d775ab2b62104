// sluice inspect MODEL.gguf: structure, sizes by class, shard sizes and disk-bound ceilings.
#include <cstdio>
#include <iostream>

#include <cxxopts.hpp>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/units.h"
#include "core/architectures.h"
#include "core/gguf/gguf.h"
#include "core/gguf/model_summary.h"
#include "io/pread_reader.h"
#include "tools/commands.h"

namespace sluice::tools {

namespace {

std::string shape_text(const core::GgufTensorInfo& t) {
  std::string s = "[";
  for (uint32_t d = 0; d < t.n_dims; ++d) s += (d ? ", " : "") + std::to_string(t.ne[d]);
  return s + "]";
}

std::string value_text(const core::GgufValue& v) {
  using T = core::GgufValueType;
  switch (v.type) {
    case T::u8: case T::u16: case T::u32: case T::u64: return std::to_string(v.u);
    case T::i8: case T::i16: case T::i32: case T::i64: return std::to_string(v.i);
    case T::f32: case T::f64: {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%g", v.f);
      return buf;
    }
    case T::boolean: return v.u ? "true" : "false";
    case T::string:
      return v.s.size() > 80 ? "\"" + v.s.substr(0, 77) + "...\" (" + std::to_string(v.s.size()) + " bytes)"
                             : "\"" + v.s + "\"";
    case T::array:
      return "[" + std::to_string(v.count) + " x " + std::string(core::to_string(v.elem_type)) + "]";
  }
  return "?";
}

nlohmann::json value_json(const core::GgufValue& v) {
  using T = core::GgufValueType;
  switch (v.type) {
    case T::u8: case T::u16: case T::u32: case T::u64: return v.u;
    case T::i8: case T::i16: case T::i32: case T::i64: return v.i;
    case T::f32: case T::f64: return v.f;
    case T::boolean: return v.u != 0;
    case T::string: return v.s;
    case T::array:
      return {{"array_of", core::to_string(v.elem_type)}, {"count", v.count}};
  }
  return nullptr;
}

// What inspect prints about one file, in either form.
struct Inspected {
  std::string path;
  const core::GgufFile& file;
  const core::ModelSummary& s;
  bool runnable;
  double disk_gbps;
  bool tensors;
};

constexpr double kHitRates[] = {0.0, 0.5, 0.9};

void print_json(const Inspected& in) {
  const core::GgufFile& file = in.file;
  const core::ModelSummary& s = in.s;
  const std::string& path = in.path;
  const bool runnable = in.runnable;
  const double disk_gbps = in.disk_gbps;
  nlohmann::json j;
  j["path"] = path;
  j["gguf_version"] = file.version();
  j["architecture"] = s.architecture;
  j["runnable"] = runnable;
  j["file_bytes"] = s.file_bytes;
  j["data_offset"] = s.data_offset;
  j["alignment"] = file.alignment();
  j["tensor_count"] = s.tensor_count;
  if (file.is_split()) {
    nlohmann::json parts = nlohmann::json::array();
    for (const auto& p : file.parts()) {
      parts.push_back({{"path", p.path}, {"bytes", p.bytes}, {"data_offset", p.data_offset}, {"tensors", p.tensor_count}});
    }
    j["parts"] = parts;
  }
  nlohmann::json classes = nlohmann::json::object();
  for (size_t c = 0; c < core::kTensorClassCount; ++c) {
    classes[std::string(core::to_string(static_cast<core::TensorClass>(c)))] = s.class_bytes[c];
  }
  j["bytes_by_class"] = classes;
  j["routed_expert_bytes"] = s.routed_expert_bytes;
  j["resident_bytes"] = s.resident_bytes;
  j["expert_shard_bytes"] = s.expert_shard_bytes;
  j["n_expert"] = s.n_expert;
  j["n_expert_used"] = s.n_expert_used;
  j["routed_bytes_per_token"] = s.routed_bytes_per_token;
  nlohmann::json layers = nlohmann::json::array();
  for (const auto& l : s.moe_layers) layers.push_back({{"layer", l.layer}, {"n_expert", l.n_expert}, {"shard_bytes", l.shard_bytes}});
  j["moe_layers"] = layers;
  nlohmann::json ceilings = nlohmann::json::array();
  if (s.routed_bytes_per_token > 0) {
    for (double h : kHitRates) {
      ceilings.push_back({{"disk_gbps", disk_gbps}, {"hit_rate", h}, {"tok_s", core::decode_ceiling_tok_s(s, disk_gbps, h)}});
    }
  }
  j["decode_ceilings"] = ceilings;
  nlohmann::json meta = nlohmann::json::object();
  for (const auto& kv : file.metadata()) meta[kv.key] = value_json(kv.value);
  j["metadata"] = meta;
  if (in.tensors) {
    nlohmann::json tensors = nlohmann::json::array();
    for (const auto& t : file.tensors()) {
      std::vector<int64_t> shape(t.ne.begin(), t.ne.begin() + t.n_dims);
      nlohmann::json entry = {{"name", t.name}, {"type", ggml_type_name(t.type)}, {"shape", shape},
                               {"offset", t.offset}, {"bytes", t.n_bytes}};
      if (file.is_split()) entry["part"] = t.part;  // index into "parts"
      tensors.push_back(entry);
    }
    j["tensors"] = tensors;
  }
  std::cout << j.dump(1) << "\n";
}

void print_text(const Inspected& in) {
  const core::GgufFile& file = in.file;
  const core::ModelSummary& s = in.s;
  const std::string& path = in.path;
  const bool runnable = in.runnable;
  const double disk_gbps = in.disk_gbps;

  std::printf("file:          %s (%s, GGUF v%u)\n", path.c_str(), human_bytes(s.file_bytes).c_str(), file.version());
  if (file.is_split()) {
    std::printf("parts:         %zu (split model; offsets below are relative to each part's data)\n", file.parts().size());
    for (size_t i = 0; i < file.parts().size(); ++i) {
      const auto& p = file.parts()[i];
      std::printf("  %zu  %s  %s, %llu tensors, data at offset %llu\n", i + 1, p.path.c_str(), human_bytes(p.bytes).c_str(),
                  static_cast<unsigned long long>(p.tensor_count), static_cast<unsigned long long>(p.data_offset));
    }
  }
  std::printf("architecture:  %s%s\n", s.architecture.empty() ? "(none)" : s.architecture.c_str(),
              runnable ? "" : "  -- not a model sluice runs (metadata and tensors only)");
  std::printf("tensors:       %llu, data at offset %llu (alignment %u)\n",
              static_cast<unsigned long long>(s.tensor_count), static_cast<unsigned long long>(s.data_offset),
              file.alignment());
  std::printf("\nmetadata:\n");
  for (const auto& kv : file.metadata()) std::printf("  %-44s %s\n", kv.key.c_str(), value_text(kv.value).c_str());
  std::printf("\nbytes by class:\n");
  for (size_t c = 0; c < core::kTensorClassCount; ++c) {
    if (s.class_bytes[c] == 0) continue;
    std::printf("  %-24s %12s\n", std::string(core::to_string(static_cast<core::TensorClass>(c))).c_str(),
                human_bytes(s.class_bytes[c]).c_str());
  }
  std::printf("  %-24s %12s\n", "resident (non-routed)", human_bytes(s.resident_bytes).c_str());
  if (!s.moe_layers.empty()) {
    std::printf("\nexperts: %u routed, %u used per token, %zu MoE layers\n", s.n_expert, s.n_expert_used, s.moe_layers.size());
    bool uniform = true;
    for (const auto& l : s.moe_layers) uniform = uniform && l.shard_bytes == s.moe_layers[0].shard_bytes;
    if (uniform) {
      std::printf("  expert shard (gate+up+down of one expert): %s\n", human_bytes(s.expert_shard_bytes).c_str());
    } else {
      for (const auto& l : s.moe_layers) std::printf("  layer %-3d shard %s\n", l.layer, human_bytes(l.shard_bytes).c_str());
    }
    std::printf("  routed bytes per token: %s\n", human_bytes(s.routed_bytes_per_token).c_str());
    std::printf("\ndisk-bound decode ceiling at %.1f GB/s:\n", disk_gbps);
    for (double h : kHitRates) {
      std::printf("  hit rate %3.0f%%: %10.1f tok/s\n", h * 100, core::decode_ceiling_tok_s(s, disk_gbps, h));
    }
  }
  if (in.tensors) {
    std::printf("\n%-40s %-8s %-24s %14s %12s%s\n", "name", "type", "shape", "offset", "bytes", file.is_split() ? "  part" : "");
    for (const auto& t : file.tensors()) {
      std::printf("%-40s %-8s %-24s %14llu %12s", t.name.c_str(), std::string(ggml_type_name(t.type)).c_str(),
                  shape_text(t).c_str(), static_cast<unsigned long long>(t.offset), human_bytes(t.n_bytes).c_str());
      if (file.is_split()) std::printf("  %u", t.part + 1);
      std::printf("\n");
    }
  }
}

}  // namespace

int cmd_inspect(int argc, char** argv) {
  cxxopts::Options options("sluice inspect", "Print a GGUF model's structure, sizes and disk-bound decode ceilings");
  options.add_options()
      ("model", "GGUF file", cxxopts::value<std::string>())
      ("tensors", "list every tensor (name, type, shape, offset, bytes)")
      ("json", "print JSON instead of text")
      ("disk-gbps", "disk bandwidth for the ceiling table, GB/s", cxxopts::value<double>()->default_value("3"))
      ("h,help", "show this help");
  options.parse_positional({"model"});
  options.positional_help("MODEL.gguf");
  auto args = options.parse(argc, argv);
  if (args.count("help")) {
    std::cout << options.help();
    return 0;
  }
  if (!args.count("model")) throw Error(ErrorCode::invalid_argument, "missing MODEL.gguf (usage: sluice inspect MODEL.gguf)");
  const std::string path = args["model"].as<std::string>();
  double disk_gbps = args["disk-gbps"].as<double>();
  if (!(disk_gbps > 0)) throw Error(ErrorCode::invalid_argument, "--disk-gbps must be > 0");

  io::PreadReader reader(path);
  core::GgufFile file = core::GgufFile::parse(reader);
  core::ModelSummary s = core::summarize(file);
  const bool runnable = core::is_runnable(file);

  const Inspected in{path, file, s, runnable, disk_gbps, args.count("tensors") > 0};
  if (args.count("json")) print_json(in);
  else print_text(in);
  return 0;
}

}  // namespace sluice::tools
