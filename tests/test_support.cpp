#include "tests/test_support.h"

#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace sluice::test {

std::filesystem::path shared_dir() { return std::filesystem::path(SLUICE_SHARED_DIR); }
std::filesystem::path reference_dir() { return shared_dir() / "reference"; }

const std::filesystem::path& require_file(const std::filesystem::path& path) {
  REQUIRE_MESSAGE(std::filesystem::exists(path), "reference data missing: " << path.string());
  return path;
}

namespace {

// Every temp_dir of this process, removed when it exits (a full run makes thousands; kept, they
// piled up in /tmp run after run). Only by the process that made them: a forked child that exits
// normally runs static destructors too, and must not remove its parent's folders.
class TempDirs {
 public:
  void add(const std::filesystem::path& dir) {
    std::lock_guard lock(mutex_);
    dirs_.push_back(dir);
  }
  ~TempDirs() {
    if (::getpid() != owner_) return;
    std::error_code ec;
    for (const auto& d : dirs_) std::filesystem::remove_all(d, ec);
  }

 private:
  const pid_t owner_ = ::getpid();
  std::mutex mutex_;
  std::vector<std::filesystem::path> dirs_;
};

}  // namespace

std::filesystem::path temp_dir(const std::string& name) {
  static std::atomic<int> counter{0};
  static TempDirs made;
  auto dir = std::filesystem::temp_directory_path() /
             ("sluice-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  made.add(dir);
  return dir;
}

const std::string& require_text(const std::string& text, const std::string& what) {
  REQUIRE_MESSAGE(text.find_first_not_of('\n') != std::string::npos, what << " is empty: no generated text to compare");
  return text;
}

std::vector<uint8_t> read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file(const std::filesystem::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

CommandResult run_sluice(const std::string& args, const std::string& env) {
  return run_command((env.empty() ? std::string() : "env " + env + " ") + "'" + SLUICE_BINARY + "' " + args);
}

std::filesystem::path source_dir() { return SLUICE_SOURCE_DIR; }
std::string sluice_binary() { return SLUICE_BINARY; }

CommandResult run_command(const std::string& command) {
  auto dir = temp_dir("cmd");
  std::string out_path = (dir / "out").string();
  std::string err_path = (dir / "err").string();
  std::string cmd = command + " >'" + out_path + "' 2>'" + err_path + "' </dev/null";
  int status = std::system(cmd.c_str());
  CommandResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = read_text(out_path);
  r.err = read_text(err_path);
  std::filesystem::remove_all(dir);
  return r;
}

}  // namespace sluice::test
