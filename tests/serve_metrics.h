// The counters of a running `sluice serve`'s /metrics (Prometheus text: "name value" lines after
// "# HELP"/"# TYPE"), for the HTTP suites that measure what the server did.
#pragma once

#include <doctest/doctest.h>

#include <httplib.h>

#include <map>
#include <sstream>
#include <string>

namespace sluice::test {

inline std::map<std::string, double> read_metrics(int port) {
  httplib::Client c("127.0.0.1", port);
  auto res = c.Get("/metrics");
  REQUIRE(res);
  REQUIRE(res->status == 200);
  std::map<std::string, double> out;
  std::istringstream in(res->body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.rfind(' ');
    if (sp != std::string::npos) out[line.substr(0, sp)] = std::stod(line.substr(sp + 1));
  }
  return out;
}

}  // namespace sluice::test
