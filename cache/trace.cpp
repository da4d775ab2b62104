#include "cache/trace.h"

#include <array>
#include <charconv>
#include <fstream>
#include <sstream>
#include <type_traits>

#include "common/error.h"

namespace sluice::cache {
namespace {

std::vector<std::string_view> split_ws(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    size_t j = i;
    while (j < line.size() && line[j] != ' ' && line[j] != '\t') ++j;
    if (j > i) out.push_back(line.substr(i, j - i));
    i = j;
  }
  return out;
}

bool parse_u64(std::string_view s, uint64_t& out) {
  if (s.empty()) return false;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = text.substr(start, nl - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines.push_back(line);
    start = nl + 1;
  }
  return lines;
}

class LineError {
 public:
  LineError(std::string_view kind, std::string_view name) : kind_(kind), name_(name) {}
  [[noreturn]] void fail(size_t line_no, const std::string& what) const {
    throw Error(ErrorCode::invalid_file, std::string(kind_) + " '" + std::string(name_) + "' line " +
                                             std::to_string(line_no) + ": " + what);
  }

 private:
  std::string_view kind_, name_;
};

uint64_t header_number(const std::vector<std::pair<std::string, std::string>>& fields,
                       const std::string& key, uint64_t max, const LineError& err) {
  for (const auto& [k, v] : fields) {
    if (k != key) continue;
    uint64_t n = 0;
    if (!parse_u64(v, n) || n == 0 || n > max) {
      err.fail(1, "header field " + key + "=" + v + " must be an integer in 1.." + std::to_string(max));
    }
    return n;
  }
  err.fail(1, "header lacks the field " + key + "=");
}

}  // namespace

uint64_t Trace::n_tokens() const {
  uint64_t n = 0;
  for (const auto& s : sequences) n += s.n_token;
  return n;
}

Trace parse_trace(std::string_view text, std::string_view name) {
  LineError err("trace", name);
  auto lines = split_lines(text);
  if (lines.empty() || lines[0].substr(0, 1) != "#") {
    err.fail(1, "expected a header '# model=<name> layers=<L> experts=<E> topk=<K> ...'");
  }
  Trace trace;
  for (std::string_view word : split_ws(lines[0].substr(1))) {
    size_t eq = word.find('=');
    if (eq == std::string_view::npos || eq == 0) {
      err.fail(1, "header word '" + std::string(word) + "' is not key=value");
    }
    trace.header.fields.emplace_back(std::string(word.substr(0, eq)), std::string(word.substr(eq + 1)));
    if (word.substr(0, eq) == "model") trace.header.model = std::string(word.substr(eq + 1));
  }
  TraceHeader& h = trace.header;
  h.n_layer = static_cast<uint32_t>(header_number(h.fields, "layers", 4096, err));
  h.n_expert = static_cast<uint32_t>(header_number(h.fields, "experts", 65536, err));
  h.topk = static_cast<uint32_t>(header_number(h.fields, "topk", h.n_expert, err));
  const uint32_t L = h.n_layer, K = h.topk;

  uint64_t seq = 0, tok = 0;
  uint32_t layer = 0;  // expected layer of the next line
  bool any = false;
  std::vector<uint8_t> seen(h.n_expert, 0);
  for (size_t n = 1; n < lines.size(); ++n) {
    const size_t line_no = n + 1;
    std::string_view line = lines[n];
    if (line.empty()) {
      if (n + 1 == lines.size()) break;  // a final newline
      err.fail(line_no, "empty line");
    }
    auto words = split_ws(line);
    if (words.size() != 3 + K) {
      err.fail(line_no, "expected " + std::to_string(3 + K) + " integers (sequence token layer and " +
                            std::to_string(K) + " experts), got " + std::to_string(words.size()) +
                            " fields");
    }
    uint64_t v[3];
    for (int f = 0; f < 3; ++f) {
      if (!parse_u64(words[f], v[f])) {
        static const char* kField[] = {"sequence id", "token index", "layer"};
        err.fail(line_no, std::string(kField[f]) + " '" + std::string(words[f]) + "' is not a non-negative integer");
      }
    }
    if (layer == 0) {
      bool next_token = any && v[0] == seq && v[1] == tok + 1;
      bool next_seq = (any ? v[0] == seq + 1 : v[0] == 0) && v[1] == 0;
      if (!next_token && !next_seq) {
        std::string expect = any ? "sequence " + std::to_string(seq) + " token " + std::to_string(tok + 1) +
                                       " or sequence " + std::to_string(seq + 1) + " token 0"
                                 : std::string("sequence 0 token 0");
        err.fail(line_no, "expected " + expect + ", got sequence " + std::to_string(v[0]) + " token " +
                              std::to_string(v[1]));
      }
      if (next_seq) trace.sequences.emplace_back();
      seq = v[0];
      tok = v[1];
      any = true;
    } else if (v[0] != seq || v[1] != tok) {
      err.fail(line_no, "sequence " + std::to_string(seq) + " token " + std::to_string(tok) + " has " +
                            std::to_string(layer) + " of " + std::to_string(L) +
                            " layers, but the next line is sequence " + std::to_string(v[0]) + " token " +
                            std::to_string(v[1]));
    }
    if (v[2] != layer) {
      err.fail(line_no, "expected layer " + std::to_string(layer) + ", got layer " + std::to_string(v[2]));
    }
    TraceSequence& s = trace.sequences.back();
    std::fill(seen.begin(), seen.end(), 0);
    for (uint32_t k = 0; k < K; ++k) {
      uint64_t e = 0;
      if (!parse_u64(words[3 + k], e) || e >= h.n_expert) {
        err.fail(line_no, "expert '" + std::string(words[3 + k]) + "' is not an integer in 0.." +
                              std::to_string(h.n_expert - 1));
      }
      if (seen[e]) err.fail(line_no, "expert " + std::to_string(e) + " is listed twice");
      seen[e] = 1;
      s.experts.push_back(static_cast<uint32_t>(e));
    }
    if (++layer == L) {
      layer = 0;
      ++s.n_token;
    }
  }
  if (!any) err.fail(lines.size(), "no routing lines after the header");
  if (layer != 0) {
    err.fail(lines.size(), "file ends inside sequence " + std::to_string(seq) + " token " + std::to_string(tok) +
                               " after " + std::to_string(layer) + " of " + std::to_string(L) + " layers");
  }
  return trace;
}

Trace read_trace(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorCode::invalid_argument, "cannot open trace '" + path.string() + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_trace(ss.str(), path.string());
}

std::string format_trace(const Trace& trace) {
  const TraceHeader& h = trace.header;
  std::string out = "#";
  bool has_counts = false;
  for (const auto& [k, v] : h.fields) {
    out += " " + k + "=" + v;
    has_counts |= k == "layers";
  }
  if (!has_counts) {
    out += " model=" + (h.model.empty() ? std::string("unknown") : h.model) + " layers=" +
           std::to_string(h.n_layer) + " experts=" + std::to_string(h.n_expert) + " topk=" + std::to_string(h.topk);
  }
  out += "\n";
  for (size_t s = 0; s < trace.sequences.size(); ++s) {
    for (uint32_t t = 0; t < trace.sequences[s].n_token; ++t) {
      for (uint32_t l = 0; l < h.n_layer; ++l) {
        out += std::to_string(s) + " " + std::to_string(t) + " " + std::to_string(l);
        for (uint32_t e : trace.step(s, t, l)) out += " " + std::to_string(e);
        out += "\n";
      }
    }
  }
  return out;
}

void write_trace(const std::filesystem::path& path, const Trace& trace) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << format_trace(trace);
  if (!out) throw Error(ErrorCode::io_error, "cannot write trace '" + path.string() + "'");
}

std::vector<ShardKey> access_sequence(const Trace& trace, size_t seq) {
  std::vector<ShardKey> out;
  const auto& s = trace.sequences.at(seq);
  out.reserve(s.experts.size());
  for (uint32_t t = 0; t < s.n_token; ++t) {
    for (uint32_t l = 0; l < trace.header.n_layer; ++l) {
      for (uint32_t e : trace.step(seq, t, l)) out.push_back(ShardKey{l, e});
    }
  }
  return out;
}

ExpertProfile build_profile(const Trace& trace, std::span<const size_t> sequences) {
  const uint32_t L = trace.header.n_layer, E = trace.header.n_expert;
  ExpertProfile p;
  p.n_layer = L;
  p.n_expert = E;
  p.counts.assign(static_cast<size_t>(L) * E, 0.0);
  p.reuse_trials.assign(kMaxReuseGap + 1, 0.0);
  p.reuse_hits.assign(kMaxReuseGap + 1, 0.0);
  std::vector<size_t> all;
  if (sequences.empty()) {
    for (size_t s = 0; s < trace.sequences.size(); ++s) all.push_back(s);
    sequences = all;
  }
  p.transitions.assign(static_cast<size_t>(L) * E * E, 0.0);
  p.transition_src.assign(static_cast<size_t>(L) * E, 0.0);
  p.next_transitions.assign(static_cast<size_t>(L) * E * E, 0.0);
  p.next_src.assign(static_cast<size_t>(L) * E, 0.0);
  std::vector<uint64_t> last_use(static_cast<size_t>(L) * E);
  std::vector<uint8_t> used(E);
  for (size_t s : sequences) {
    std::fill(last_use.begin(), last_use.end(), 0);
    const uint32_t T = trace.sequences.at(s).n_token;
    p.n_tokens += T;
    for (uint32_t t = 0; t < T; ++t) {
      const uint64_t v = t + 1;  // visit index, 1-based
      for (uint32_t l = 0; l < L; ++l) {
        std::fill(used.begin(), used.end(), 0);
        for (uint32_t e : trace.step(s, t, l)) used[e] = 1;
        if (t > 0) {
          for (uint32_t i : trace.step(s, t - 1, l)) {
            p.next_src[static_cast<size_t>(l) * E + i] += 1;
            for (uint32_t j : trace.step(s, t, l)) p.next_transitions[(static_cast<size_t>(l) * E + i) * E + j] += 1;
          }
        }
        if (l > 0) {
          for (uint32_t i : trace.step(s, t, l - 1)) {
            p.transition_src[static_cast<size_t>(l) * E + i] += 1;
            for (uint32_t j : trace.step(s, t, l)) p.transitions[(static_cast<size_t>(l) * E + i) * E + j] += 1;
          }
        }
        for (uint32_t e = 0; e < E; ++e) {
          size_t i = static_cast<size_t>(l) * E + e;
          uint64_t gap = last_use[i] == 0 ? kMaxReuseGap : std::min<uint64_t>(v - 1 - last_use[i], kMaxReuseGap);
          p.reuse_trials[gap] += 1;
          if (used[e]) {
            p.reuse_hits[gap] += 1;
            p.counts[i] += 1;
            last_use[i] = v;
          }
        }
      }
    }
  }
  return p;
}

namespace {
// The profile's two transition tables share one text form: '<src word> l i count' for a source's
// total and '<count word> l i j count' for one transition, zero entries left out.
template <class Table>
struct PairTable {
  const char* src_word;
  const char* count_word;
  uint64_t first_layer;  // within-token transitions start at layer 1
  const char* src_usage;
  const char* count_usage;
  Table* src;
  Table* counts;
};
// Profile is ExpertProfile or const ExpertProfile: the tables are writable only for the first.
template <class Profile>
auto pair_tables(Profile& p) {
  using Table = std::remove_reference_t<decltype((p.transitions))>;  // const for a const profile
  return std::array<PairTable<Table>, 2>{
      PairTable<Table>{"src", "trans", 1, "src <layer 1..L-1> <expert> <count>",
                       "trans <layer 1..L-1> <from expert> <to expert> <count>", &p.transition_src, &p.transitions},
      PairTable<Table>{"nsrc", "ntrans", 0, "nsrc <layer> <expert> <count>",
                       "ntrans <layer> <expert at token t> <expert at token t+1> <count>", &p.next_src,
                       &p.next_transitions}};
}
}  // namespace

std::string format_profile(const ExpertProfile& p) {
  std::ostringstream out;
  out << "# sluice expert profile layers=" << p.n_layer << " experts=" << p.n_expert << " tokens=" << p.n_tokens
      << "\n";
  for (uint32_t l = 0; l < p.n_layer; ++l) {
    out << "layer " << l;
    for (uint32_t e = 0; e < p.n_expert; ++e) out << " " << p.counts[static_cast<size_t>(l) * p.n_expert + e];
    out << "\n";
  }
  for (size_t g = 0; g < p.reuse_trials.size(); ++g) {
    out << "reuse " << g << " " << p.reuse_trials[g] << " " << p.reuse_hits[g] << "\n";
  }
  for (const auto& t : pair_tables(p)) {
    for (size_t k = 0; k < t.src->size(); ++k) {
      if ((*t.src)[k] == 0) continue;
      out << t.src_word << " " << k / p.n_expert << " " << k % p.n_expert << " " << (*t.src)[k] << "\n";
      for (uint32_t j = 0; j < p.n_expert; ++j) {
        double c = (*t.counts)[k * p.n_expert + j];
        if (c != 0) out << t.count_word << " " << k / p.n_expert << " " << k % p.n_expert << " " << j << " " << c << "\n";
      }
    }
  }
  return out.str();
}

ExpertProfile parse_profile(std::string_view text, std::string_view name) {
  LineError err("profile", name);
  auto lines = split_lines(text);
  ExpertProfile p;
  if (lines.empty() || lines[0].substr(0, 24) != "# sluice expert profile ") {
    err.fail(1, "expected a header '# sluice expert profile layers=<L> experts=<E> tokens=<N>'");
  }
  std::vector<std::pair<std::string, std::string>> fields;
  for (std::string_view word : split_ws(lines[0].substr(24))) {
    size_t eq = word.find('=');
    if (eq == std::string_view::npos) err.fail(1, "header word '" + std::string(word) + "' is not key=value");
    fields.emplace_back(std::string(word.substr(0, eq)), std::string(word.substr(eq + 1)));
  }
  p.n_layer = static_cast<uint32_t>(header_number(fields, "layers", 4096, err));
  p.n_expert = static_cast<uint32_t>(header_number(fields, "experts", 65536, err));
  p.n_tokens = header_number(fields, "tokens", UINT64_MAX, err);
  p.counts.assign(static_cast<size_t>(p.n_layer) * p.n_expert, 0.0);
  p.reuse_trials.assign(kMaxReuseGap + 1, 0.0);
  p.reuse_hits.assign(kMaxReuseGap + 1, 0.0);
  auto number = [&](std::string_view w, size_t line_no) {
    double d = 0;
    auto [ptr, ec] = std::from_chars(w.data(), w.data() + w.size(), d);
    if (ec != std::errc() || ptr != w.data() + w.size() || d < 0) {
      err.fail(line_no, "'" + std::string(w) + "' is not a non-negative number");
    }
    return d;
  };
  uint32_t layer = 0;
  for (size_t n = 1; n < lines.size(); ++n) {
    size_t line_no = n + 1;
    if (lines[n].empty() && n + 1 == lines.size()) break;
    auto w = split_ws(lines[n]);
    if (layer < p.n_layer) {
      if (w.size() != 2 + p.n_expert || w[0] != "layer" || w[1] != std::to_string(layer)) {
        err.fail(line_no, "expected 'layer " + std::to_string(layer) + "' and " + std::to_string(p.n_expert) + " counts");
      }
      for (uint32_t e = 0; e < p.n_expert; ++e) p.counts[static_cast<size_t>(layer) * p.n_expert + e] = number(w[2 + e], line_no);
      ++layer;
      continue;
    }
    bool table_line = false;
    for (const auto& t : pair_tables(p)) {
      if (w.empty() || (w[0] != t.src_word && w[0] != t.count_word)) continue;
      const bool src = w[0] == t.src_word;
      uint64_t l = 0, i = 0, j = 0;
      if (w.size() != (src ? 4u : 5u) || !parse_u64(w[1], l) || !parse_u64(w[2], i) || l < t.first_layer ||
          l >= p.n_layer || i >= p.n_expert || (!src && (!parse_u64(w[3], j) || j >= p.n_expert))) {
        err.fail(line_no, std::string("expected '") + (src ? t.src_usage : t.count_usage) + "'");
      }
      if (t.counts->empty()) {
        t.counts->assign(static_cast<size_t>(p.n_layer) * p.n_expert * p.n_expert, 0.0);
        t.src->assign(static_cast<size_t>(p.n_layer) * p.n_expert, 0.0);
      }
      if (src) (*t.src)[l * p.n_expert + i] = number(w[3], line_no);
      else (*t.counts)[(l * p.n_expert + i) * p.n_expert + j] = number(w[4], line_no);
      table_line = true;
    }
    if (table_line) continue;
    uint64_t gap = 0;
    if (w.size() != 4 || w[0] != "reuse" || !parse_u64(w[1], gap) || gap > kMaxReuseGap) {
      err.fail(line_no, "expected 'reuse <gap 0.." + std::to_string(kMaxReuseGap) + "> <trials> <hits>'");
    }
    p.reuse_trials[gap] = number(w[2], line_no);
    p.reuse_hits[gap] = number(w[3], line_no);
  }
  if (layer != p.n_layer) err.fail(lines.size(), "only " + std::to_string(layer) + " of " + std::to_string(p.n_layer) + " layer lines");
  return p;
}

}  // namespace sluice::cache
