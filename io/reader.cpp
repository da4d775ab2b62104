#include "io/reader.h"

#include <cerrno>
#include <cstring>

namespace sluice::io {

std::string describe_read_failure(const std::string& path, uint64_t offset, uint64_t length,
                                  int64_t negative_errno) {
  std::string reason = negative_errno == -ENODATA
                           ? std::string("past end of file")
                           : std::string(std::strerror(static_cast<int>(-negative_errno)));
  return "read of " + std::to_string(length) + " bytes at offset " + std::to_string(offset) +
         " of '" + path + "' failed: " + reason;
}

}  // namespace sluice::io
