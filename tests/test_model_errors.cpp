// Rejected inputs: each checks the error code and a substring of the message.
#include <doctest/doctest.h>

#include <algorithm>

#include "common/error.h"
#include "tests/model_files.h"
#include "core/llama/in_core_experts.h"

namespace {

using namespace sluice;
using namespace sluice::test;

template <class F>
void check_error(F&& f, ErrorCode code, const std::string& substring) {
  try {
    f();
    FAIL("no error thrown; expected: " << substring);
  } catch (const Error& e) {
    CHECK(e.code() == code);
    const std::string what = e.what();
    CHECK_MESSAGE(what.find(substring) != std::string::npos, what);
  }
}

std::filesystem::path ds2() { return tiny_dir("deepseek2") / "deepseek2-f16.gguf"; }

}  // namespace

TEST_CASE("a model of an unknown architecture is rejected") {
  SourceModel src(ds2());
  const auto path = write_modified(src, "arch", [](core::GgufWriter& w) { w.set_string("general.architecture", "gpt2"); });
  check_error([&] { core::Model::load(path.string()); }, ErrorCode::unsupported, "architecture 'gpt2'");
}

TEST_CASE("a model missing a tensor is rejected with its name") {
  SourceModel src(ds2());
  const auto path = write_modified(src, "missing", [](core::GgufWriter& w) { w.remove_tensor("blk.1.attn_q_b.weight"); });
  check_error([&] { core::Model::load(path.string()); }, ErrorCode::invalid_file, "missing tensor 'blk.1.attn_q_b.weight'");
}

TEST_CASE("a tensor of the wrong shape is rejected with both shapes") {
  SourceModel src(ds2());
  const auto path = write_modified(src, "shape", [](core::GgufWriter& w) {
    w.remove_tensor("blk.1.attn_q_b.weight");
    w.add_tensor("blk.1.attn_q_b.weight", GgmlType::F16, {256, 700}, std::vector<std::byte>(256 * 700 * 2));
  });
  check_error([&] { core::Model::load(path.string()); }, ErrorCode::invalid_file,
              "tensor 'blk.1.attn_q_b.weight' has shape [256, 700], expected [256, 768]");
}

TEST_CASE("an expert tensor with the wrong expert count is rejected") {
  SourceModel src(tiny_dir("qwen3moe") / "qwen3moe-f16.gguf");
  const auto path = write_modified(src, "experts", [](core::GgufWriter& w) { w.set_u32("qwen3moe.expert_count", 6); });
  check_error([&] { core::Model::load(path.string()); }, ErrorCode::invalid_file,
              "tensor 'blk.0.ffn_gate_inp.weight' has shape [256, 8], expected [256, 6]");
}

TEST_CASE("an unsupported gating function is rejected") {
  SourceModel src(ds2());
  const auto path = write_modified(src, "gating", [](core::GgufWriter& w) { w.set_u32("deepseek2.expert_gating_func", 3); });
  check_error([&] { core::Model::load(path.string()); }, ErrorCode::unsupported, "expert_gating_func = 3");
}

TEST_CASE("a prompt longer than the context is rejected") {
  const core::Model model = core::Model::load(ds2().string());
  kernels::ThreadPool pool(1);
  core::InCoreExpertSource experts(model);
  core::LlamaSession session(model, experts, pool, {.n_ctx = 16, .n_batch = 64, .kv_type = GgmlType::F32});
  const std::vector<int32_t> prompt(29, 5);
  check_error([&] { session.forward(prompt, 0); }, ErrorCode::invalid_argument, "do not fit the context of 16 tokens");
  const std::vector<int32_t> ten(10, 5);
  session.forward(ten, 0);
  check_error([&] { session.forward(ten, 10); }, ErrorCode::invalid_argument, "10 tokens at position 10");
}

TEST_CASE("a token id outside the vocabulary is rejected") {
  const core::Model model = core::Model::load(ds2().string());
  kernels::ThreadPool pool(1);
  core::InCoreExpertSource experts(model);
  core::LlamaSession session(model, experts, pool, {.n_ctx = 16, .n_batch = 8});
  const std::vector<int32_t> bad{1, 2048};
  check_error([&] { session.forward(bad, 0); }, ErrorCode::invalid_argument, "token id 2048 is outside the vocabulary");
  const std::vector<int32_t> many(9, 1);
  check_error([&] { session.forward(many, 0); }, ErrorCode::invalid_argument, "exceeds the batch size 8");
}

TEST_CASE("sluice run rejects a prompt longer than the context") {
  const auto r = run_sluice("run -m '" + ds2().string() + "' --tokens 1,2,3,4,5,6,7,8,9,10 -c 8 -n 2");
  CHECK(r.exit_code == 1);
  CHECK_MESSAGE(r.err.find("prompt of 10 tokens is longer than the context of 8 tokens") != std::string::npos, r.err);
}

TEST_CASE("sluice run rejects a bad KV cache type") {
  const auto r = run_sluice("run -m '" + ds2().string() + "' --tokens 1,2 --kv-type q8_0");
  CHECK(r.exit_code == 1);
  CHECK_MESSAGE(r.err.find("--kv-type 'q8_0' must be f16 or f32") != std::string::npos, r.err);
}

// Semantic checks after parsing: hyperparameters that contradict each other or the tensor
// directory are rejected by Model::load before any weight is read or allocated.
TEST_CASE("expert_used_count above expert_count is rejected") {
  SourceModel src(tiny_dir("qwen3moe") / "qwen3moe-f16.gguf");
  const auto path = write_modified(src, "used", [](core::GgufWriter& w) { w.set_u32("qwen3moe.expert_used_count", 9); });
  check_error([&] { core::Model::load(path.string()); }, ErrorCode::invalid_file,
              "expert_used_count 9 is not in [1, expert_count 8]");
}

TEST_CASE("a head count that head_count_kv does not divide is rejected") {
  SourceModel src(tiny_dir("qwen3moe") / "qwen3moe-f16.gguf");
  const auto path = write_modified(src, "kv", [](core::GgufWriter& w) { w.set_u32("qwen3moe.attention.head_count_kv", 3); });
  check_error([&] { core::Model::load(path.string()); }, ErrorCode::invalid_file,
              "attention.head_count 4 is not a multiple of head_count_kv 3");
}

TEST_CASE("a head count that does not divide the embedding is rejected when no key length is given") {
  SourceModel src(tiny_dir("llama-moe") / "llama-moe-f16.gguf");
  const auto path = write_modified(src, "heads", [](core::GgufWriter& w) {
    w.remove("llama.attention.key_length");
    w.remove("llama.attention.value_length");
    w.set_u32("llama.attention.head_count", 3);
    w.set_u32("llama.attention.head_count_kv", 3);
  });
  check_error([&] { core::Model::load(path.string()); }, ErrorCode::invalid_file,
              "embedding_length 256 is not a multiple of attention.head_count 3");
}

TEST_CASE("expert tensors whose shape disagrees with expert_feed_forward_length are rejected") {
  SourceModel src(tiny_dir("qwen3moe") / "qwen3moe-f16.gguf");
  const auto path = write_modified(src, "ffexp", [](core::GgufWriter& w) {
    w.set_u32("qwen3moe.expert_feed_forward_length", 128);
  });
  check_error([&] { core::Model::load(path.string()); }, ErrorCode::invalid_file,
              "tensor 'blk.0.ffn_gate_exps.weight' has shape [256, 256, 8], expected [256, 128, 8]");
}

TEST_CASE("a tensor of a block past block_count is rejected with its name") {
  SourceModel src(ds2());
  const auto path = write_modified(src, "block", [](core::GgufWriter& w) {
    w.add_tensor("blk.7.attn_norm.weight", GgmlType::F32, {256}, std::vector<std::byte>(256 * 4));
  });
  check_error([&] { core::Model::load(path.string()); }, ErrorCode::invalid_file,
              "tensor 'blk.7.attn_norm.weight' names block 7, past block_count 3");
}

TEST_CASE("leading_dense_block_count past block_count is rejected") {
  SourceModel src(ds2());
  const auto path = write_modified(src, "lead", [](core::GgufWriter& w) { w.set_u32("deepseek2.leading_dense_block_count", 5); });
  check_error([&] { core::Model::load(path.string()); }, ErrorCode::invalid_file,
              "leading_dense_block_count 5 is past block_count 3");
}

TEST_CASE("sluice run rejects inconsistent hyperparameters with one line before loading weights") {
  SourceModel src(tiny_dir("qwen3moe") / "qwen3moe-f16.gguf");
  const auto path = write_modified(src, "used_cli", [](core::GgufWriter& w) { w.set_u32("qwen3moe.expert_used_count", 9); });
  auto r = run_sluice("run -m '" + path.string() + "' -p hi -n 1 --budget 1G");
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("expert_used_count 9") != std::string::npos);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
}

TEST_CASE("a block_count larger than the tensor directory is rejected before the tensor checks") {
  SourceModel src(ds2());
  const auto path = write_modified(src, "blocks", [](core::GgufWriter& w) { w.set_u32("deepseek2.block_count", 100000000); });
  check_error([&] { core::Model::load(path.string()); }, ErrorCode::invalid_file, "block_count 100000000 is more than the");
}

TEST_CASE("a kimi-k3 block_count larger than the tensor directory is rejected before any per-block table") {
  // Found by fuzzing: 2^32-1 blocks grew the per-layer key tables and the expected-tensor list
  // until the process ran out of memory.
  SourceModel src(reference_dir() / "kimi-k3" / "kimi-k3-q8_0.gguf");
  const auto path = write_modified(src, "k3_blocks", [](core::GgufWriter& w) { w.set_u32("kimi-k3.block_count", 4000000000u); });
  auto r = run_sluice("run -m '" + path.string() + "' -p hi -n 1 --budget 1G");
  CHECK(r.exit_code == 1);
  CHECK_MESSAGE(r.err.find("block_count 4000000000 is more than the") != std::string::npos, r.err);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
}
