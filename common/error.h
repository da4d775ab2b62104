// sluice::Error: the one exception type for failures a user can cause or act on.
//
// Every error carries a code (so tests and callers can branch on the kind of failure) and a
// message meant for a person at the command line: it names the field, the value, the limit and,
// where there is one, the file offset, e.g.
//   tensor 'blk.3.ffn_up_exps.weight' ends at 4.6 GiB, past end of file (4.1 GiB)
// The CLI prints what() on one line and exits non-zero.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace sluice {

enum class ErrorCode {
  invalid_file,      // the file is not what it claims to be (malformed GGUF, bad shapes)
  unsupported,       // well-formed but not something sluice computes (yet)
  invalid_argument,  // a flag or API argument is wrong
  io_error,          // the OS failed a read (EIO, short file, permission)
  corrupt_data,      // bytes changed on disk or in flight (checksum mismatch)
  budget,            // the memory budget cannot hold what is required
  internal,          // a broken invariant inside sluice
};

std::string_view to_string(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace sluice
