// Helpers shared by the test suites: where the reference data lives, reading whole files,
// running the sluice binary. Reference data and tools are part of the test set-up: a missing one
// fails the case naming it (require_file), never skips it; only a missing GPU skips.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

namespace sluice::test {

// True in ASan/TSan builds, where shadow memory inflates RSS and instrumentation slows code:
// memory ceilings and speed bounds are checked in plain builds only.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kUnderSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kUnderSanitizer = true;
#else
constexpr bool kUnderSanitizer = false;
#endif
#else
constexpr bool kUnderSanitizer = false;
#endif

// ../shared next to the source tree (CI lays it there too).
std::filesystem::path shared_dir();
std::filesystem::path reference_dir();  // shared_dir() / "reference"
// Fails the case (REQUIRE) with "reference data missing: PATH" unless `path` exists; returns it.
const std::filesystem::path& require_file(const std::filesystem::path& path);
// A fresh empty directory under the build's temp area, unique per call; removed when the test
// process exits.
std::filesystem::path temp_dir(const std::string& name);
// temp_dir that is removed, with everything in it, when the scope ends (pass or fail): for tests
// that write hundreds of MB (an install tree, a .deb), which would otherwise fill the disk over runs.
class ScopedTempDir {
 public:
  explicit ScopedTempDir(const std::string& name) : path_(temp_dir(name)) {}
  ~ScopedTempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

std::vector<uint8_t> read_file(const std::filesystem::path& path);
std::string read_text(const std::filesystem::path& path);
void write_file(const std::filesystem::path& path, const std::vector<uint8_t>& bytes);

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};
// Fails the case (REQUIRE) when `text` holds nothing but newlines, naming `what`; returns it.
// A check on generated text calls it first: "" is a prefix of any text, and two runs that
// generated nothing print the same "\n", so a comparison alone passes on an empty continuation.
const std::string& require_text(const std::string& text, const std::string& what);
// Runs the built `sluice` binary with the given argument string (shell-quoted by the caller).
// `env` is an optional prefix of VAR=value assignments for the command.
CommandResult run_sluice(const std::string& args, const std::string& env = "");
// Runs a shell command line (quoted by the caller), capturing stdout and stderr.
CommandResult run_command(const std::string& command);
// The source tree and the built binary, for tests that drive scripts/.
std::filesystem::path source_dir();
std::string sluice_binary();

}  // namespace sluice::test
