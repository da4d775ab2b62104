// Prompt cache (sluice run --prompt-cache FILE, llama-cli's --prompt-cache): the state of sequence
// 0 after a prompt, saved to a file so that a later run whose prompt starts with the same tokens
// prefills only the rest.
//
// What is reused is decided by the rule serve uses for a slot's KV cache (reusable_prefix,
// app/serve_scheduler.h): the longest common prefix of the saved tokens and the new prompt, at
// most the prompt's length - 1 (the last prompt token is always computed, for its logits). A
// session that cannot rewind (kimi-k3's recurrent KDA state) reuses the file only when the prompt
// extends all the saved tokens; otherwise nothing. One rule more: at least two prompt tokens are
// computed, so that every computed row takes the batched form a whole-prompt prefill gives it (a
// one-token forward sums F16/F32 products in ggml's vector order: other last bits). A KV cache
// then reuses at most the prompt's length - 2; kimi-k3 nothing when the prompt adds one token.
// So a reusing run prints the same text and the same logits rows as a run without the cache,
// bit for bit, for prompts of up to n_batch tokens (one batch without the cache).
//
// The state moves through Session::save_state/load_state (core/arch/session.h), straight between
// the file and the session's own KV cache and recurrent state, so the loaded state is inside
// --budget and nothing big is allocated: rows a shorter prefix does not keep, and the checksum
// pass, go through one bounded buffer (kChunkBytes).
//
// File layout, little-endian, every field fixed width:
//   magic        8 bytes "SLUICEPC"
//   version      u32 (kPromptCacheVersion)
//   arch_len     u32, then arch_len bytes: general.architecture ("deepseek2", "kimi-k3", ...)
//   model_bytes  u64: the model's file size (all parts of a split model)
//   model_digest u64: XXH3-64 of the GGUF header bytes [0, data_offset) of every part
//                (core::ShardIndex::fingerprint, the same identity `sluice index` records)
//   n_vocab      u64
//   kv_type      u32: GgmlType of the KV cache (F16 = 1, F32 = 0)
//   fixed_bytes  u64, bytes_per_token u64: the session's SequenceStateShape
//   n_tokens     u64, then n_tokens x i32 token ids
//   state        SequenceStateShape::bytes(n_tokens) bytes: Session::save_state's stream
//   digest       u64: XXH3-64 of every byte above
// A file whose fields disagree with the running model is refused before any state is read: not a
// prompt cache / another version (invalid_file), another architecture or model file
// (invalid_file), another --kv-type (invalid_argument), a size that disagrees with its header
// (corrupt_data, "truncated"). A digest mismatch (corrupt_data) is found after the state was
// streamed into the session; the caller then must not use the session (run exits). Writing goes
// to FILE.tmp, renamed over FILE when complete, so a failed save leaves the old file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>

#include "core/arch/session.h"

namespace sluice::core {

class Engine;

inline constexpr uint32_t kPromptCacheVersion = 1;

// What a prompt cache file must match to be loaded into a session.
struct PromptCacheKey {
  std::string architecture;
  uint64_t model_bytes = 0;
  uint64_t model_digest = 0;
  int64_t n_vocab = 0;
  SequenceStateShape shape;
};

// The key of the engine's model and session (reads the model's GGUF header once).
PromptCacheKey prompt_cache_key(Engine& engine);

struct PromptCacheLoad {
  bool found = false;        // the file existed (and passed every check)
  int64_t saved_tokens = 0;  // tokens the file holds
  int64_t reused = 0;        // prompt tokens now in sequence 0 (positions [0, reused))
};

// When `path` exists: checks it against `key`, loads the reusable prefix of `prompt` into
// sequence 0 of `session` and verifies the digest over the whole file. Errors as above; a file
// that does not exist is {found = false}.
PromptCacheLoad load_prompt_cache(const std::filesystem::path& path, const PromptCacheKey& key, Session& session,
                                  std::span<const int32_t> prompt);

// Writes `tokens` and sequence 0's state after them (Session::save_state(tokens.size())) to
// `path`; returns the file's size. Error(io_error) when the file cannot be written.
uint64_t save_prompt_cache(const std::filesystem::path& path, const PromptCacheKey& key, const Session& session,
                           std::span<const int32_t> tokens);

}  // namespace sluice::core
