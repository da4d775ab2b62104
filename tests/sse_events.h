// The data events of a server-sent-event stream from sluice serve, for the serve suites that read
// streamed replies: each `data: ...` payload parsed as JSON, in order, up to the `[DONE]` that
// must end the stream (checked).
#pragma once

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace sluice::test {

inline std::vector<nlohmann::json> sse_events(const std::string& raw) {
  std::vector<nlohmann::json> out;
  bool done = false;
  for (size_t at = 0; (at = raw.find("data: ", at)) != std::string::npos;) {
    const size_t end = raw.find("\n\n", at);
    const std::string data = raw.substr(at + 6, end - at - 6);
    at = end;
    if (data == "[DONE]") {
      done = true;
      break;
    }
    out.push_back(nlohmann::json::parse(data));
  }
  CHECK(done);
  return out;
}

}  // namespace sluice::test
