// Trace reader/writer: strict parsing with line numbers, round trips, profiles.
#include <doctest/doctest.h>

#include <string>

#include "cache/trace.h"
#include "common/error.h"
#include "tests/test_support.h"

using namespace sluice::cache;
using sluice::Error;
using sluice::ErrorCode;

namespace {

const char* kHeader = "# model=toy layers=2 experts=4 topk=2 source=x\n";

void check_rejected(const std::string& text, const std::string& fragment) {
  try {
    parse_trace(text, "toy.trace");
    FAIL("accepted: " << text);
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::invalid_file);
    CAPTURE(e.what());
    CHECK(std::string(e.what()).find(fragment) != std::string::npos);
    CHECK(std::string(e.what()).find("toy.trace") != std::string::npos);
  }
}

}  // namespace

TEST_CASE("trace reader parses a well-formed trace") {
  std::string text = std::string(kHeader) + "0 0 0 1 2\n0 0 1 3 0\n0 1 0 2 1\n0 1 1 0 3\n1 0 0 0 1\n1 0 1 2 3\n";
  Trace t = parse_trace(text, "toy.trace");
  CHECK(t.header.model == "toy");
  CHECK(t.header.n_layer == 2);
  CHECK(t.header.n_expert == 4);
  CHECK(t.header.topk == 2);
  REQUIRE(t.sequences.size() == 2);
  CHECK(t.sequences[0].n_token == 2);
  CHECK(t.sequences[1].n_token == 1);
  CHECK(t.step(0, 1, 1)[0] == 0);
  CHECK(t.step(0, 1, 1)[1] == 3);
  CHECK(t.n_tokens() == 3);
  auto seq = access_sequence(t, 0);
  REQUIRE(seq.size() == 8);
  CHECK(seq[2] == ShardKey{1, 3});
  // Round trip.
  CHECK(format_trace(parse_trace(format_trace(t), "again")) == format_trace(t));
}

TEST_CASE("trace reader rejects malformed lines with their line numbers") {
  const std::string h = kHeader;
  check_rejected("0 0 0 1 2\n", "line 1: expected a header");
  check_rejected("# model=toy experts=4 topk=2\n0 0 0 1 2\n", "lacks the field layers=");
  check_rejected("# model=toy layers=2 experts=4 topk=9\n", "topk=9 must be an integer in 1..4");
  check_rejected(h + "0 0 0 1\n", "line 2: expected 5 integers");
  check_rejected(h + "0 0 0 1 x\n", "line 2: expert 'x' is not an integer in 0..3");
  check_rejected(h + "0 0 0 1 4\n", "line 2: expert '4' is not an integer in 0..3");
  check_rejected(h + "0 0 0 1 1\n", "line 2: expert 1 is listed twice");
  check_rejected(h + "0 0 1 1 2\n", "line 2: expected layer 0, got layer 1");
  check_rejected(h + "0 0 0 1 2\n0 1 0 1 2\n", "line 3: sequence 0 token 0 has 1 of 2 layers");
  check_rejected(h + "0 0 0 1 2\n0 0 1 1 2\n0 2 0 1 2\n0 2 1 1 2\n", "line 4: expected sequence 0 token 1");
  check_rejected(h + "1 0 0 1 2\n", "line 2: expected sequence 0 token 0");
  check_rejected(h + "0 0 0 1 2\n0 0 1 1 2\n2 0 0 1 2\n", "line 4: expected sequence 0 token 1 or sequence 1 token 0");
  check_rejected(h + "0 0 0 1 2\n\n0 0 1 1 2\n", "line 3: empty line");
  check_rejected(h + "0 0 0 1 2\n", "file ends inside sequence 0 token 0 after 1 of 2 layers");
  check_rejected(h, "no routing lines");
  check_rejected(h + "-1 0 0 1 2\n", "sequence id '-1' is not a non-negative integer");
}

TEST_CASE("trace reader loads both shared traces") {
  auto dir = sluice::test::shared_dir() / "traces";
  Trace m = read_trace(sluice::test::require_file(dir / "mixtral-8x7b.trace"));
  CHECK(m.header.n_layer == 32);
  CHECK(m.header.n_expert == 8);
  CHECK(m.header.topk == 2);
  CHECK(m.sequences.size() == 3);
  CHECK(m.n_tokens() == 411);
  Trace f = read_trace(sluice::test::require_file(dir / "flame-moe-290m.trace"));
  CHECK(f.header.n_layer == 8);
  CHECK(f.header.n_expert == 64);
  CHECK(f.header.topk == 6);
  CHECK(f.sequences.size() == 5);
  CHECK(f.n_tokens() == 1280);
}

TEST_CASE("expert profiles count uses and round trip through text") {
  Trace t = parse_trace(std::string(kHeader) + "0 0 0 1 2\n0 0 1 3 0\n0 1 0 2 1\n0 1 1 0 3\n", "toy");
  ExpertProfile p = build_profile(t);
  CHECK(p.n_tokens == 2);
  CHECK(p.count({0, 1}) == 2);
  CHECK(p.count({0, 0}) == 0);
  CHECK(p.count({1, 3}) == 2);
  // Reuse at gap 0: token 1 reuses {1,2} at layer 0 (2 of 2) and {3,0} at layer 1 (2 of 2).
  CHECK(p.reuse_hits[0] == 4);
  CHECK(p.reuse_trials[0] == 4);
  // Token-to-token at one layer: token 0 {1,2} -> token 1 {2,1} at layer 0, {3,0} -> {0,3} at 1.
  CHECK(p.next_src[0 * 4 + 1] == 1);
  CHECK(p.next_src[0 * 4 + 0] == 0);
  CHECK(p.next_transitions[(0 * 4 + 1) * 4 + 2] == 1);
  CHECK(p.next_transitions[(1 * 4 + 3) * 4 + 0] == 1);
  CHECK(p.next_transitions[(1 * 4 + 3) * 4 + 1] == 0);
  ExpertProfile q = parse_profile(format_profile(p), "p");
  CHECK(q.counts == p.counts);
  CHECK(q.reuse_hits == p.reuse_hits);
  CHECK(q.reuse_trials == p.reuse_trials);
  CHECK(q.transitions == p.transitions);
  CHECK(q.next_transitions == p.next_transitions);
  CHECK(q.next_src == p.next_src);
  try {
    parse_profile(format_profile(p) + "ntrans 0 1 9 3\n", "bad.profile");  // expert 9 of 4
    FAIL("accepted");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::invalid_file);
    CHECK(std::string(e.what()).find("ntrans <layer> <expert at token t> <expert at token t+1> <count>") !=
          std::string::npos);
  }
  try {
    parse_profile("# sluice expert profile layers=2 experts=4 tokens=2\nlayer 0 1 2 3\n", "bad.profile");
    FAIL("accepted");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::invalid_file);
    CHECK(std::string(e.what()).find("'bad.profile' line 2") != std::string::npos);
  }
}
