// A JSON pre-check on the raw bytes of a request body, before any value is built: nesting depth
// and the number of values (array elements, object members, scalars) are counted by an
// iterative SAX pass (nlohmann::json::sax_parse keeps its own explicit stack), and the pass
// stops at the first limit passed. With depth bounded, nothing later (the DOM parse, copies,
// destruction) recurses deeper than kMaxJsonDepth on client input.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace sluice::tools {

constexpr size_t kMaxJsonDepth = 64;
constexpr size_t kMaxJsonValues = 65536;  // a 65536-token prompt given as ids still fits

// "" when `body` is within the limits (or is not JSON at all: the real parse reports that);
// otherwise a one-line message naming the limit.
std::string json_limit_error(std::string_view body);

}  // namespace sluice::tools
