// The flags that say how a command opens its model, declared and read once for run, chat,
// perplexity and serve: -m, --budget, --cache-experts, --in-core, --io, --policy, --route, --verify, the KV
// type, and where a command offers them --widen-f16, --io-faults and --gpu/--vram/--vram-policy.
// Also the sampling flags run and chat share. Every bad value is one Error(invalid_argument) line
// naming the flag, before anything is loaded.
#pragma once

#include <cxxopts.hpp>

#include "app/sampler.h"
#include "core/engine.h"
#include "tools/session_flags.h"

namespace sluice::tools {

// The optional flags a command offers beyond the common set.
struct EngineFlagSet {
  bool widen_f16 = false;  // --widen-f16
  bool io_faults = false;  // --io-faults (testing)
  bool gpu = false;        // --gpu, --vram, --vram-policy
};

void add_engine_flags(cxxopts::Options& options, const EngineFlagSet& set);

// --route (core/experts/cache_aware_routing.h), declared by add_engine_flags and by bench.
inline constexpr const char* kRouteFlag = "route";
inline constexpr const char* kRouteFlagHelp =
    "expert routing: exact, or cache-aware[=J[,M]] (keep the top J, fill the rest from experts already in RAM "
    "among the top M; changes results; J = k/2 and M = 2k by default)";

// --mla-attn (core/arch/session.h: which prompts take MLA's decompressed prefill form), declared by
// add_engine_flags and by bench; read_mla_attn_flag sets the session's thresholds from its value.
inline constexpr const char* kMlaAttnFlag = "mla-attn";
inline constexpr const char* kMlaAttnFlagHelp =
    "MLA prefill attention (deepseek2: DeepSeek-V3, Kimi K2; kimi-k3; F16 KV): auto (decompressed keys and values for a batch of >= 256 tokens over "
    ">= 1024 cells), absorbed (llama.cpp's form always) or decompressed (every batch of >= 2 tokens)";
void read_mla_attn_flag(const std::string& value, core::SessionOptions& o);

// EngineOptions from those flags and the session flags (threads, context, batch: the batch is cut
// to the context when one is given).
core::EngineOptions read_engine_flags(const cxxopts::ParseResult& args, const EngineFlagSet& set, const SessionFlags& sf);

// --io, --policy, --route, --verify and (where offered) --io-faults into `eo`; part of read_engine_flags,
// and bench's reading of the same flags beside its budget sweeps.
void read_io_flags(const cxxopts::ParseResult& args, const EngineFlagSet& set, core::EngineOptions& eo);

// --gpu, --vram and --vram-policy into `eo` (bench declares them itself, beside its sweeps).
void read_gpu_flags(const cxxopts::ParseResult& args, core::EngineOptions& eo);

// --temp, --top-k, --top-p, --min-p, --repeat-penalty, --repeat-last-n, -s.
void add_sampling_flags(cxxopts::Options& options);
core::SamplerOptions read_sampling_flags(const cxxopts::ParseResult& args);

}  // namespace sluice::tools
