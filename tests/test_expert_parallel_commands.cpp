// `--expert-parallel` on perplexity and chat (every rank evaluates, rank 0 prints; chat: rank 0
// reads stdin and broadcasts each line), and a serve job whose rank 0 fails a batch step ends as
// a whole instead of leaving rank 1 waiting in the step's exchange.
#include <doctest/doctest.h>

#include <regex>
#include <thread>

#include "core/gguf/gguf.h"
#include "io/pread_reader.h"
#include "tests/mpirun_support.h"
#include "tests/serve_process.h"
#include "tests/test_support.h"

#ifdef SLUICE_HAVE_MPI

using namespace sluice;
namespace fs = std::filesystem;

namespace {

fs::path deepseek2() { return test::reference_dir() / "tiny/deepseek2/deepseek2-q4_k_m.gguf"; }

// The chat's stdout without its per-turn status lines (timings and per-rank hit rates differ).
std::string answers_only(const std::string& out) {
  return std::regex_replace(out, std::regex(R"(\n\[prefill [^\]]*\]\n)"), "\n[status]\n");
}

}  // namespace

TEST_CASE("mpirun -np 2 sluice perplexity --expert-parallel prints one process's numbers exactly") {
  const std::string text = (test::reference_dir() / "tiny/deepseek2/imatrix-text.txt").string();
  const std::string args =
      "perplexity -m '" + deepseek2().string() + "' -f '" + text + "' -c 128 -b 128 --kv-type f32 --cache-experts 25%";
  const auto one = test::run_sluice(args);
  REQUIRE_MESSAGE(one.exit_code == 0, one.err);
  for (int np : {1, 2}) {
    CAPTURE(np);
    const auto ep = test::run_command(test::mpirun(np) + "'" + test::sluice_binary() + "' " + args + " --expert-parallel");
    REQUIRE_MESSAGE(ep.exit_code == 0, ep.err);
    CHECK(ep.out.find("Final estimate: PPL = ") != std::string::npos);
    CHECK(ep.out == one.out);  // every chunk's value and the final estimate, printed once
  }
}

TEST_CASE("a chat piped into mpirun -np 2 sluice chat --expert-parallel answers as one process does") {
  const std::string model = (test::reference_dir() / "tiny/qwen3moe/qwen3moe-q4_k_m.gguf").string();
  const std::string input = "printf 'Hello there\\nWhat comes next?\\n/reset\\nOnce more\\n' | ";
  const std::string args = "chat -m '" + model + "' -n 12 --kv-type f32 -c 512 --cache-experts 50%";
  const auto one = test::run_command("(" + input + "'" + test::sluice_binary() + "' " + args + ")");
  REQUIRE_MESSAGE(one.exit_code == 0, one.err);
  const auto two =
      test::run_command("(" + input + "timeout 120 " + test::mpirun(2) + "'" + test::sluice_binary() + "' " + args +
                        " --expert-parallel)");  // a rank that misses a line would wait forever
  REQUIRE_MESSAGE(two.exit_code == 0, two.err);
  const std::string a = answers_only(one.out), b = answers_only(two.out);
  CHECK(std::count(a.begin(), a.end(), '[') == 3);  // three answers
  CHECK(b == a);
}

TEST_CASE("an expert-parallel serve job whose rank 0 fails a batch step ends with its error line instead of hanging rank 1") {
  // Every even expert's gate slice fails to read, persistently: under --expert-parallel only
  // rank 0 (expert e -> rank e mod 2) reads them, so rank 0's step throws while rank 1 waits in
  // the exchange. One process would answer the request with an error and serve on; two ranks
  // cannot, and the job must end.
  std::string faults = "seed=1";
  {
    io::PreadReader reader(deepseek2().string());
    const auto file = core::GgufFile::parse(reader);
    for (const auto& t : file.tensors()) {
      if (t.name.find("ffn_gate_exps") == std::string::npos) continue;
      const uint64_t slice = t.n_bytes / static_cast<uint64_t>(t.ne[2]);
      for (int64_t e = 0; e < t.ne[2]; e += 2) faults += ",fail_at=" + std::to_string(t.file_offset + static_cast<uint64_t>(e) * slice);
    }
  }
  const std::vector<std::string> args{"-m", deepseek2().string(), "--parallel", "1", "--cache-experts", "50%",
                                      "--io", "pread", "--io-faults", faults, "--expert-parallel"};
  const std::vector<std::string> launcher{"env", "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
                                          "OMPI_MCA_btl=self,vader", "OMPI_MCA_btl_vader_single_copy_mechanism=none",
                                          "mpirun", "--oversubscribe", "-np", "2"};
  test::ServeProcess server(args, 120, launcher);
  std::thread client([&] {
    test::raw_post(server.port(), "/v1/completions", R"({"prompt":"The quick brown fox","max_tokens":8,"temperature":0})");
  });
  bool ended = false;
  for (int i = 0; i < 600 && !ended; ++i) {  // 60 s
    ended = !server.alive();
    if (!ended) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const std::string err = server.stderr_text();
  INFO(err);
  CHECK(ended);
  CHECK(err.find("sluice serve: error: ") != std::string::npos);
  CHECK(err.find("Input/output error") != std::string::npos);
  CHECK(server.stop() != 0);
  client.join();
}

#endif
