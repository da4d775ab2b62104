// The soak of sluice serve (scripts/serve_soak.py) as a bounded CI case: for 60 s (30 s under a
// sanitizer, which runs the server several times slower) six clients mix valid greedy requests
// with hostile ones, while three attackers run throughout (malformed requests at 100/s, POST
// heads whose body never comes, valid bodies trickled at 17 KiB/s; issue 39); the script fails
// on a crash, any 5xx, a lost valid request, a greedy text that differs from `sluice run`'s (or
// is empty), or a failed shutdown. python3 is required: its absence is a failure, not a skip.
#include <doctest/doctest.h>

#include "tests/model_reference.h"
#include "tests/serve_process.h"

namespace {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr int kSeconds = 30;
#else
constexpr int kSeconds = 60;
#endif
}  // namespace

TEST_CASE("sluice serve survives a soak of valid and hostile clients with sluice run's greedy text") {
  using namespace sluice::test;
  const std::string model = (tiny_dir("qwen3moe") / "qwen3moe-q4_k_m.gguf").string();
  const std::string script = std::string(SLUICE_SOURCE_DIR) + "/scripts/serve_soak.py";
  const std::string cmd = "python3 '" + script + "' --sluice '" + ServeProcess::binary() + "' --model '" + model +
                          "' --seconds " + std::to_string(kSeconds) + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int status = pclose(p);
  MESSAGE(out);
  CHECK(status == 0);
  CHECK(out.find("serve_soak: ok") != std::string::npos);
}
