#include "tools/bounded_json.h"

#include <nlohmann/json.hpp>

namespace sluice::tools {

namespace {

// Counts; returning false from a callback ends the parse there.
struct LimitCounter : nlohmann::json_sax<nlohmann::json> {
  size_t depth = 0, values = 0;
  std::string error;

  bool value() {
    if (++values <= kMaxJsonValues) return true;
    error = "the JSON body has more than " + std::to_string(kMaxJsonValues) + " values (the limit)";
    return false;
  }
  bool open() {
    if (!value()) return false;
    if (++depth <= kMaxJsonDepth) return true;
    error = "the JSON body nests deeper than " + std::to_string(kMaxJsonDepth) + " levels (the limit)";
    return false;
  }
  bool null() override { return value(); }
  bool boolean(bool) override { return value(); }
  bool number_integer(number_integer_t) override { return value(); }
  bool number_unsigned(number_unsigned_t) override { return value(); }
  bool number_float(number_float_t, const string_t&) override { return value(); }
  bool string(string_t&) override { return value(); }
  bool binary(binary_t&) override { return value(); }
  bool start_object(std::size_t) override { return open(); }
  bool key(string_t&) override { return true; }
  bool end_object() override { return --depth, true; }
  bool start_array(std::size_t) override { return open(); }
  bool end_array() override { return --depth, true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }
};

}  // namespace

std::string json_limit_error(std::string_view body) {
  LimitCounter counter;
  nlohmann::json::sax_parse(body, &counter);
  return counter.error;
}

}  // namespace sluice::tools
