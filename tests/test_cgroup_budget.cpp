// `sluice run --budget 128M` inside a real memory cap: a child memory cgroup limited to the budget
// plus the stated slack, on a model whose routed experts are four times the budget
// (tests/budget_model.h). The run must finish and never be OOM-killed. The negative control runs
// the same command in the same kind of cgroup with the budget bypassed (SLUICE_TEST_IGNORE_BUDGET=1,
// a test-only switch of `sluice run`: every expert in core) and must be OOM-killed: a cgroup's
// charge can never exceed its limit, so being killed is how a violation shows here.
// Needs root and a writable memory controller (cgroup v1 at /sys/fs/cgroup/memory, or v2 with
// the memory controller enabled); without them the test fails, saying why.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "tests/budget_model.h"
#include "tests/test_support.h"

namespace fs = std::filesystem;

namespace {

using sluice::test::kBudgetTestBudget;
// As in test_budget_rss.cpp: what a process holds beyond the model's budgeted memory. The cgroup
// also charges the page cache the run fills, which the kernel reclaims before it kills.
constexpr uint64_t kSlack = 32ull << 20;

std::string read_all(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool write_value(const fs::path& p, const std::string& value) {
  std::ofstream out(p);
  out << value;
  out.flush();
  return static_cast<bool>(out);
}

// "key value" lines (memory.oom_control, memory.events): the value of `key`, or nullopt.
std::optional<uint64_t> field(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  std::string k;
  uint64_t v = 0;
  while (in >> k >> v) {
    if (k == key) return v;
  }
  return std::nullopt;
}

// This process's cgroup path for the memory controller: "N:memory:/path" (v1) or "0::/path" (v2).
std::optional<std::string> own_cgroup(bool v1) {
  std::istringstream in(read_all("/proc/self/cgroup"));
  std::string line;
  while (std::getline(in, line)) {
    size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    std::string controllers = line.substr(a + 1, b - a - 1);
    bool match = v1 ? (("," + controllers + ",").find(",memory,") != std::string::npos)
                    : (line.substr(0, a) == "0" && controllers.empty());
    if (match) return line.substr(b + 1);
  }
  return std::nullopt;
}

struct MemoryCgroup {
  fs::path dir;
  bool v1 = true;
  std::string procs() const { return (dir / "cgroup.procs").string(); }
  uint64_t peak() const {
    std::string p = read_all(dir / (v1 ? "memory.max_usage_in_bytes" : "memory.peak"));
    return p.empty() ? 0 : std::stoull(p);
  }
  uint64_t oom_kills() const {
    auto v = v1 ? field(read_all(dir / "memory.oom_control"), "oom_kill")
                : field(read_all(dir / "memory.events"), "oom_kill");
    return v.value_or(0);
  }
};

// Creates a child of this process's memory cgroup limited to `limit` bytes (swap off where the
// kernel lets us say so); nullopt with `why` set when the machine does not allow it.
std::optional<MemoryCgroup> make_cgroup(uint64_t limit, std::string& why) {
  if (::geteuid() != 0) {
    why = "not root";
    return std::nullopt;
  }
  MemoryCgroup cg;
  fs::path parent;
  if (fs::exists("/sys/fs/cgroup/memory/memory.limit_in_bytes")) {
    auto own = own_cgroup(true);
    parent = fs::path("/sys/fs/cgroup/memory") / fs::path(own.value_or("/")).relative_path();
  } else if (read_all("/sys/fs/cgroup/cgroup.controllers").find("memory") != std::string::npos) {
    cg.v1 = false;
    auto own = own_cgroup(false);
    parent = fs::path("/sys/fs/cgroup") / fs::path(own.value_or("/")).relative_path();
    if (read_all(parent / "cgroup.subtree_control").find("memory") == std::string::npos &&
        !write_value(parent / "cgroup.subtree_control", "+memory")) {
      why = "cgroup v2 memory controller cannot be enabled under " + parent.string();
      return std::nullopt;
    }
  } else {
    why = "no cgroup memory controller";
    return std::nullopt;
  }
  cg.dir = parent / ("sluice-test-" + std::to_string(::getpid()));
  std::error_code ec;
  fs::create_directory(cg.dir, ec);
  if (ec || !fs::exists(cg.dir / "cgroup.procs")) {
    why = "cannot create a memory cgroup under " + parent.string();
    return std::nullopt;
  }
  const std::string bytes = std::to_string(limit);
  bool ok = cg.v1 ? write_value(cg.dir / "memory.limit_in_bytes", bytes) : write_value(cg.dir / "memory.max", bytes);
  if (!ok) {
    fs::remove(cg.dir, ec);
    why = "cannot set the memory limit of " + cg.dir.string();
    return std::nullopt;
  }
  // No escape to swap: the limit must bind on memory itself (best effort; absent without swap).
  if (cg.v1) write_value(cg.dir / "memory.memsw.limit_in_bytes", bytes);
  else write_value(cg.dir / "memory.swap.max", "0");
  return cg;
}

struct CgroupRun {
  sluice::test::CommandResult result;
  uint64_t peak = 0, kills = 0;
};

// Runs `sluice args` (with `env` assignments) as the only process of a fresh cgroup of `limit`.
CgroupRun run_in_cgroup(uint64_t limit, const std::string& args, const std::string& env = "") {
  std::string why;
  std::optional<MemoryCgroup> cg = make_cgroup(limit, why);
  REQUIRE_MESSAGE(cg.has_value(), "cannot make a memory cgroup: " << why);
  // The shell joins the cgroup, then becomes sluice: everything sluice allocates is charged.
  const std::string join = env + (env.empty() ? "" : " ") + "sh -c 'echo $$ > " + cg->procs() + " && exec \"$0\" \"$@\"'";
  CgroupRun run;
  run.result = sluice::test::run_sluice(args, join);
  run.peak = cg->peak();
  run.kills = cg->oom_kills();
  std::error_code ec;
  fs::remove(cg->dir, ec);  // empty again once sluice has exited
  CHECK_MESSAGE(!ec, "cannot remove " << cg->dir.string() << ": " << ec.message());
  MESSAGE("cgroup " << (cg->v1 ? "v1" : "v2") << " limit " << limit << " bytes: peak charge " << run.peak
                    << " bytes, OOM kills " << run.kills << ", exit " << run.result.exit_code);
  return run;
}

}  // namespace

TEST_CASE("sluice run --budget 128M inside a cgroup of budget plus 32 MiB is never OOM-killed, and bypassing the budget is") {
  if (sluice::test::kUnderSanitizer) {
    MESSAGE("skipped: sanitizer shadow memory does not fit the production memory limit");
    return;
  }
  const uint64_t limit = kBudgetTestBudget + kSlack;
  const std::string args = "run -m '" + sluice::test::budget_model().string() +
                           "' --tokens 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16 -n 12 -c 64 -b 16 --ignore-eos "
                           "--budget 128M --stats";
  const CgroupRun bounded = run_in_cgroup(limit, args);
  CHECK_MESSAGE(bounded.result.exit_code == 0, bounded.result.err);
  CHECK(bounded.result.err.find("peak RSS") != std::string::npos);
  CHECK(bounded.kills == 0);
  CHECK(bounded.peak > 0);

  // The control: the same run with the budget bypassed needs ~4x the limit and must be killed.
  const CgroupRun bypassed = run_in_cgroup(limit, args, "SLUICE_TEST_IGNORE_BUDGET=1");
  CHECK(bypassed.result.exit_code != 0);
  CHECK(bypassed.kills >= 1);
}
