// The folders depend on each other one way only (README, "Layout"): every `#include "dir/..."`
// of the library and the CLI is checked against the table below. A new folder must be added to
// the table before its files pass.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

// Which units each unit may include (its own files always). A unit is a top-level folder, or a
// folder of core/ ("core/gguf"); core/'s own files (the Engine, the architecture registry) are
// the unit "core", above every core folder. Inside core: gguf < text, compute < experts < arch
// (the Architecture seam) < layers (block streaming, any architecture) < llama, kimi_k3 (peers)
// < gpu < core.
const std::map<std::string, std::set<std::string>>& allowed() {
  static const std::map<std::string, std::set<std::string>> table = [] {
    const std::set<std::string> base{"common", "io", "cache", "kernels"};
    auto with = [&](std::initializer_list<const char*> more) {
      std::set<std::string> s = base;
      for (const char* m : more) s.insert(m);
      return s;
    };
    std::set<std::string> all_core = with({"core", "core/gguf", "core/text", "core/compute", "core/experts",
                                           "core/arch", "core/layers", "core/llama", "core/kimi_k3", "core/gpu"});
    std::set<std::string> tools = all_core;
    tools.insert({"app", "synth"});
    return std::map<std::string, std::set<std::string>>{
        {"common", {}},
        {"io", {"common"}},
        {"kernels", {"common"}},
        {"cache", {"common", "io"}},
        {"core/gguf", base},
        {"core/text", with({"core/gguf"})},
        {"core/compute", with({"core/gguf"})},
        {"core/experts", with({"core/gguf", "core/compute"})},
        {"core/arch", with({"core/gguf", "core/compute", "core/experts"})},
        {"core/layers", with({"core/gguf", "core/compute", "core/experts", "core/arch"})},
        {"core/llama", with({"core/gguf", "core/compute", "core/experts", "core/arch", "core/layers"})},
        {"core/kimi_k3", with({"core/gguf", "core/compute", "core/experts", "core/arch", "core/layers"})},
        {"core/gpu", with({"core/gguf", "core/compute", "core/experts", "core/arch", "core/layers", "core/llama",
                           "core/kimi_k3"})},
        {"core", all_core},
        {"app", all_core},
        {"synth", all_core},
        {"tools", tools},
    };
  }();
  return table;
}

// "core/llama/model.h" -> "core/llama"; "core/engine.h" -> "core"; "kernels/cpu/x.h" -> "kernels".
std::string unit_of(const std::string& path) {
  const size_t a = path.find('/');
  if (a == std::string::npos) return "";
  const std::string top = path.substr(0, a);
  if (top != "core") return top;
  const size_t b = path.find('/', a + 1);
  return b == std::string::npos ? "core" : path.substr(0, b);
}

// One wrong arrow: "core/gguf/gguf.cpp: core/gguf -> core/llama (core/llama/model.h)".
std::vector<std::string> check_file(const std::string& rel_path, std::istream& text) {
  static const std::regex include_re(R"(^\s*#\s*include\s*\"([^\"]+)\")");
  std::vector<std::string> wrong;
  const std::string from = unit_of(rel_path);
  auto it = allowed().find(from);
  if (it == allowed().end()) return {rel_path + ": folder '" + from + "' is not in the layering table"};
  std::string line;
  std::smatch m;
  while (std::getline(text, line)) {
    if (!std::regex_search(line, m, include_re)) continue;
    const std::string target = m[1];
    const std::string to = unit_of(target);
    if (to.empty() || to == from) continue;  // same folder (kernels/cpu's local headers)
    if (allowed().count(to) == 0 && to != "tests") continue;  // not ours
    if (it->second.count(to) == 0) wrong.push_back(rel_path + ": " + from + " -> " + to + " (" + target + ")");
  }
  return wrong;
}

std::vector<std::string> check_tree(const fs::path& root) {
  std::vector<std::string> wrong;
  for (const char* top : {"common", "io", "cache", "kernels", "core", "app", "synth", "tools"}) {
    for (const auto& entry : fs::recursive_directory_iterator(root / top)) {
      const std::string ext = entry.path().extension().string();
      if (!entry.is_regular_file() || (ext != ".h" && ext != ".cpp" && ext != ".cu" && ext != ".cuh")) continue;
      std::ifstream in(entry.path());
      for (std::string& w : check_file(fs::relative(entry.path(), root).string(), in)) wrong.push_back(std::move(w));
    }
  }
  return wrong;
}

}  // namespace

TEST_CASE("every include of the library and the CLI points down the layering") {
  const std::vector<std::string> wrong = check_tree(SLUICE_SOURCE_DIR);
  for (const std::string& w : wrong) MESSAGE(w);
  CHECK(wrong.empty());
}

TEST_CASE("the layering check catches an upward include and an unknown folder") {
  std::istringstream up("#include \"core/llama/model.h\"\n#include \"core/gguf/tensor.h\"\n");
  const std::vector<std::string> wrong = check_file("core/gguf/gguf.cpp", up);
  REQUIRE(wrong.size() == 1);
  CHECK(wrong[0].find("core/gguf -> core/llama") != std::string::npos);
  std::istringstream peer("  #include \"core/llama/session.h\"\n");
  CHECK(check_file("core/kimi_k3/kimi_k3_ffn.cpp", peer).size() == 1);
  std::istringstream app("#include \"app/bench.h\"\n");
  CHECK(check_file("core/engine.cpp", app).size() == 1);
  std::istringstream io("#include \"cache/arena.h\"\n");
  CHECK(check_file("io/reader.cpp", io).size() == 1);
  std::istringstream none("");
  CHECK(check_file("core/newfolder/x.cpp", none).size() == 1);
}
