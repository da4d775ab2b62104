// llama.cpp's flag spellings (tools/llama_flags.h) give the same runs as sluice's own, and the
// -t/-c/-b checks (tools/session_flags.h) refuse absurd values with one line.
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>

#include "tests/serve_process.h"
#include "tests/test_support.h"

using namespace sluice;

namespace {

std::string model() { return (test::reference_dir() / "tiny/deepseek2/deepseek2-q4_k_m.gguf").string(); }

}  // namespace

TEST_CASE("sluice run takes llama.cpp's spellings and prints what sluice's own flags print") {
  const auto dir = test::temp_dir("llama-flags");
  const auto prompt = dir / "prompt.txt";
  std::ofstream(prompt) << "The quick brown fox";
  const auto ours = test::run_sluice("run -m '" + model() + "' -p 'The quick brown fox' -n 6 -c 128 -b 16 -t 1 --seed 3 --kv-type f32");
  const auto theirs = test::run_sluice("run -m '" + model() + "' -f '" + prompt.string() +
                                       "' --n-predict 6 --ctx-size 128 --batch-size 16 --threads 1 -s 3 -ctk f32 -ctv f32 -no-cnv");
  INFO(ours.err);
  INFO(theirs.err);
  REQUIRE(ours.exit_code == 0);
  REQUIRE(theirs.exit_code == 0);
  // run -p prints the prompt before the continuation.
  REQUIRE(ours.out.starts_with("The quick brown fox"));
  test::require_text(ours.out.substr(19), "the run's continuation");
  CHECK(theirs.out == ours.out);
  CHECK(theirs.err.find("KV cache 480.0 KiB") != std::string::npos);  // f32 (f16 would be 240 KiB)
  CHECK(ours.err.find("KV cache 480.0 KiB") != std::string::npos);
}

TEST_CASE("in-core runs map the file with --mmap and read it in otherwise, with the same text, and --mmap needs --in-core") {
  const std::string run = "run -m '" + model() + "' -p 'The quick brown fox' -n 6 -c 128 --kv-type f32 --in-core";
  const auto read_default = test::run_sluice(run);
  const auto mapped = test::run_sluice(run + " --mmap");
  const auto read_in = test::run_sluice(run + " --no-mmap");
  REQUIRE_MESSAGE(read_default.exit_code == 0, read_default.err);
  REQUIRE_MESSAGE(mapped.exit_code == 0, mapped.err);
  REQUIRE_MESSAGE(read_in.exit_code == 0, read_in.err);
  REQUIRE(read_in.out.starts_with("The quick brown fox"));
  test::require_text(read_in.out.substr(19), "the run's continuation");
  CHECK(mapped.out == read_in.out);
  CHECK(read_default.out == read_in.out);
  CHECK(mapped.err.find("weights mapped from the file") != std::string::npos);
  CHECK(read_default.err.find("weights mapped") == std::string::npos);
  CHECK(read_in.err.find("weights mapped") == std::string::npos);

  const auto budget = test::run_sluice("run -m '" + model() + "' -p x -n 1 --budget 64M --mmap");
  CHECK(budget.exit_code == 1);
  CHECK(budget.err.find("--mmap needs --in-core") != std::string::npos);
  const auto both = test::run_sluice(run + " --mmap --no-mmap");
  CHECK(both.exit_code == 1);
  CHECK(both.err.find("--mmap and --no-mmap contradict each other") != std::string::npos);
}

TEST_CASE("-ctk and -ctv that disagree, a quantized cache type, or a missing -f file are one-line errors") {
  const auto one = test::run_sluice("run -m '" + model() + "' -p x -n 1 -ctk f32");
  CHECK(one.exit_code == 1);
  CHECK(one.err.find("-ctk and -ctv name different types") != std::string::npos);
  const auto q8 = test::run_sluice("run -m '" + model() + "' -p x -n 1 -ctk q8_0 -ctv q8_0");
  CHECK(q8.exit_code == 1);
  CHECK(q8.err.find("-ctk 'q8_0' must be f16 or f32") != std::string::npos);
  const auto nofile = test::run_sluice("run -m '" + model() + "' -f /nonexistent/prompt.txt -n 1");
  CHECK(nofile.exit_code == 1);
  CHECK(nofile.err.find("cannot read the prompt file '/nonexistent/prompt.txt'") != std::string::npos);
}

TEST_CASE("sluice run refuses a negative or absurd -c and a -b below 1, and cuts -t to the CPUs with a note") {
  for (const char* flags : {"-c -1", "-c 2147483647"}) {
    const auto r = test::run_sluice("run -m '" + model() + "' -p x -n 1 " + flags);
    CAPTURE(flags);
    CHECK(r.exit_code == 1);
    CHECK(r.err.find(" must be in [0, 1048576]") != std::string::npos);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  }
  const auto b0 = test::run_sluice("run -m '" + model() + "' -p x -n 1 -b 0");
  CHECK(b0.exit_code == 1);
  CHECK(b0.err.find("-b 0 must be in [1, 65536]") != std::string::npos);
  const auto t = test::run_sluice("run -m '" + model() + "' -p x -n 1 -t 1000");
  CHECK(t.exit_code == 0);
  CHECK(t.err.find("-t 1000 is more than the ") != std::string::npos);
}

TEST_CASE("sluice serve takes llama-server's -np and -ctk/-ctv") {
  test::ServeProcess server({"-m", model(), "-np", "2", "-ctk", "f32", "-ctv", "f32", "-c", "128"});
  const std::string err = server.stderr_text();
  CHECK(err.find("2 slots of 128 tokens") != std::string::npos);
  CHECK(err.find("KV cache 960.0 KiB") != std::string::npos);  // 2 slots x 128 tokens x f32
}

TEST_CASE("sluice run and bench refuse an unknown --mla-attn form in one line, and run takes each form") {
  for (const std::string cmd : {"run -m '" + model() + "' -p x -n 1", "bench -m '" + model() + "' --probe-seconds 0"}) {
    const auto bad = test::run_sluice(cmd + " --mla-attn fast");
    CHECK(bad.exit_code == 1);
    CHECK(bad.err.find("--mla-attn 'fast': give auto, absorbed or decompressed") != std::string::npos);
    CHECK(std::count(bad.err.begin(), bad.err.end(), '\n') == 1);
  }
  for (const char* form : {"auto", "absorbed", "decompressed"}) {
    CAPTURE(form);
    const auto r = test::run_sluice("run -m '" + model() + "' -p 'The quick brown fox' -n 4 -c 128 -t 1 --mla-attn " + form);
    CHECK(r.exit_code == 0);
    CHECK(!r.out.empty());
  }
}
