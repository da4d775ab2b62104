#include "cache/tune.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "common/error.h"
#include "common/units.h"

namespace sluice::cache {
namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string json_number(std::optional<double> v) {
  if (!v || !std::isfinite(*v)) return "null";
  return fmt("%.6g", *v);
}

std::string json_array(const std::vector<double>& values) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + json_number(values[i]);
  return out + "]";
}

}  // namespace

const TuneRow* TuneReport::find(std::string_view policy, size_t budget_index) const {
  for (const auto& r : rows) {
    if (r.policy == policy && r.budget.label == budgets.at(budget_index).label) return &r;
  }
  return nullptr;
}

std::vector<TuneBudget> parse_budgets(const std::vector<std::string>& budgets, const TraceHeader& h,
                                      uint64_t shard_bytes, uint64_t resident_bytes) {
  const uint64_t n_shards = static_cast<uint64_t>(h.n_layer) * h.n_expert;
  std::vector<TuneBudget> out;
  for (const std::string& text : budgets) {
    TuneBudget b;
    b.label = text;
    if (is_percent(text)) {
      double f = parse_percent(text, "--budgets");
      b.capacity_slots = static_cast<uint64_t>(std::floor(f * n_shards + 1e-9));
    } else {
      if (shard_bytes == 0) {
        throw Error(ErrorCode::invalid_argument, "--budgets: '" + text +
                                                     "' is a size, which needs --shard-mb (or give a "
                                                     "percentage of all routed experts such as 10%)");
      }
      uint64_t bytes = parse_size(text, "--budgets");
      if (bytes <= resident_bytes) {
        throw Error(ErrorCode::budget, "--budgets: " + text + " (" + human_bytes(bytes) +
                                           ") does not exceed the resident weights (" +
                                           human_bytes(resident_bytes) + ")");
      }
      b.capacity_slots = std::min(n_shards, (bytes - resident_bytes) / shard_bytes);
    }
    if (b.capacity_slots < h.topk) {
      double min_fraction = static_cast<double>(h.topk) / n_shards;
      throw Error(ErrorCode::budget,
                  "--budgets: " + text + " holds " + std::to_string(b.capacity_slots) + " of " +
                      std::to_string(n_shards) + " expert shards, below the " + std::to_string(h.topk) +
                      " one token uses per layer; the minimum is " + fmt("%.2f%%", 100.0 * min_fraction) +
                      (shard_bytes ? " (" + human_bytes(resident_bytes + h.topk * shard_bytes) + ")" : ""));
    }
    b.fraction = static_cast<double>(b.capacity_slots) / n_shards;
    b.budget_bytes = shard_bytes ? resident_bytes + b.capacity_slots * shard_bytes : 0;
    out.push_back(b);
  }
  return out;
}

std::vector<std::string> default_policies(const Trace& trace, std::string& note, bool cold) {
  note.clear();
  std::vector<std::string> out;
  std::string skipped;
  for (const std::string& p : policy_names()) {
    if (cold && policy_requires_profile(p)) continue;  // without a profile it cannot run
    if (!cold && trace.sequences.size() < 2 && policy_needs_profile(p)) {
      skipped += (skipped.empty() ? "" : ", ") + p;
      continue;
    }
    out.push_back(p);
  }
  if (!skipped.empty())
    note = "the trace has one sequence, so the learned policies (" + skipped +
           ") cannot be scored leave-one-sequence-out; reporting the others";
  return out;
}

TuneReport run_tune(const Trace& trace, const TuneOptions& o) {
  const TraceHeader& h = trace.header;
  for (const auto& p : o.policies) {  // reject unknown names before any work
    const auto& names = policy_names();
    if (std::find(names.begin(), names.end(), p) == names.end()) make_policy(p, {});
  }
  if (o.policies.empty()) throw Error(ErrorCode::invalid_argument, "--policies: no policy given");
  TuneReport rep;
  rep.model = h.model;
  rep.n_layer = h.n_layer;
  rep.n_expert = h.n_expert;
  rep.topk = h.topk;
  rep.n_sequences = trace.sequences.size();
  rep.n_tokens = trace.n_tokens();
  rep.shard_bytes = o.shard_bytes;
  rep.budgets = parse_budgets(o.budgets, h, o.shard_bytes, o.resident_bytes);
  const double active_bytes = static_cast<double>(o.resident_bytes) +
                              static_cast<double>(h.n_layer) * h.topk * static_cast<double>(o.shard_bytes);
  for (const TuneBudget& b : rep.budgets) {
    for (const std::string& p : o.policies) {
      SimResult s = evaluate_policy(trace, p, b.capacity_slots, o.policy_options);
      TuneRow row;
      row.policy = p;
      row.clairvoyant = policy_is_clairvoyant(p);
      row.budget = b;
      row.hit_rate = s.hit_rate();
      row.misses_per_token = s.misses_per_token();
      for (const auto& l : s.layers) {
        row.layer_hit_rates.push_back(l.hit_rate());
        row.layer_accesses.push_back(l.hits + l.misses);
      }
      if (o.shard_bytes) {
        row.miss_bytes_per_token = row.misses_per_token * static_cast<double>(o.shard_bytes);
        double cap = o.mem_gbps * 1e9 / active_bytes;
        double disk = *row.miss_bytes_per_token > 0 ? o.disk_gbps * 1e9 / *row.miss_bytes_per_token : cap;
        row.predicted_tok_s = std::min(disk, cap);
      }
      rep.rows.push_back(std::move(row));
    }
  }
  for (size_t bi = 0; bi < rep.budgets.size(); ++bi) {
    const TuneRow* bound = rep.find("belady", bi);
    if (bound == nullptr) continue;
    const TuneRow bel = *bound;  // a copy: the loop below writes to every row, belady's included
    for (TuneRow& row : rep.rows) {
      if (row.budget.label != rep.budgets[bi].label) continue;
      row.gap_to_belady = bel.hit_rate - row.hit_rate;
      for (size_t l = 0; l < row.layer_hit_rates.size(); ++l)
        row.layer_gaps_to_belady.push_back(bel.layer_hit_rates.at(l) - row.layer_hit_rates[l]);
    }
  }
  // Recommendation: the non-clairvoyant policy best at the most budgets (mean hit rate breaks ties).
  std::map<std::string, std::pair<int, double>> score;
  for (size_t bi = 0; bi < rep.budgets.size(); ++bi) {
    const TuneRow* best = nullptr;
    for (const auto& p : o.policies) {
      const TuneRow* r = rep.find(p, bi);
      if (r == nullptr || r->clairvoyant) continue;
      score[p].second += r->hit_rate;
      if (best == nullptr || r->hit_rate > best->hit_rate + 1e-12) best = r;
    }
    if (best) ++score[best->policy].first;
  }
  std::string pick;
  for (const auto& p : o.policies) {
    if (!score.count(p)) continue;
    if (pick.empty() || score[p] > score[pick]) pick = p;
  }
  if (!pick.empty()) {
    rep.recommendation = pick + " (best non-clairvoyant policy at " + std::to_string(score[pick].first) + " of " +
                         std::to_string(rep.budgets.size()) + " budgets)";
    for (size_t bi = 0; bi < rep.budgets.size(); ++bi) {
      const TuneRow* lru = rep.find("lru", bi);
      const TuneRow* bel = rep.find("belady", bi);
      const TuneRow* best = rep.find(pick, bi);
      if (lru && bel && best && bel->hit_rate > lru->hit_rate) {
        double closed = (best->hit_rate - lru->hit_rate) / (bel->hit_rate - lru->hit_rate);
        rep.recommendation += (bi == 0 ? "; LRU->Belady gap closed: " : ", ") + fmt("%.0f%%", 100 * closed) +
                              " at " + rep.budgets[bi].label;
      }
    }
  }
  return rep;
}

std::string format_tune_text(const TuneReport& r) {
  std::string out = "trace: " + r.model + ", " + std::to_string(r.n_sequences) + " sequences, " +
                    std::to_string(r.n_tokens) + " tokens, " + std::to_string(r.n_layer) + " layers x " +
                    std::to_string(r.n_expert) + " experts, top-" + std::to_string(r.topk) + "\n";
  out += "scored leave-one-sequence-out, each sequence from a cold cache; belady = clairvoyant bound;\n"
         "lookahead = belady seeing only the current token and the next few (the bound for a perfect router predictor)\n";
  if (r.shard_bytes) out += "shard size: " + human_bytes(r.shard_bytes) + "\n";
  for (size_t bi = 0; bi < r.budgets.size(); ++bi) {
    const TuneBudget& b = r.budgets[bi];
    out += "\nbudget " + b.label + ": " + std::to_string(b.capacity_slots) + " shards (" +
           fmt("%.1f%%", 100 * b.fraction) + " of experts" +
           (b.budget_bytes ? ", " + human_bytes(b.budget_bytes) : std::string()) + ")\n";
    out += "  policy       hit rate  misses/token  miss MiB/token  tok/s    per-layer hit rate (min..max)\n";
    for (const auto& row : r.rows) {
      if (row.budget.label != b.label) continue;
      double lo = 1, hi = 0;
      for (double x : row.layer_hit_rates) lo = std::min(lo, x), hi = std::max(hi, x);
      char line[256];
      std::snprintf(line, sizeof line, "  %-11s  %7.1f%%  %12.2f  %14s  %-7s  %.1f%%..%.1f%%\n", row.policy.c_str(),
                    100 * row.hit_rate, row.misses_per_token,
                    row.miss_bytes_per_token ? fmt("%.1f", *row.miss_bytes_per_token / (1 << 20)).c_str() : "-",
                    row.predicted_tok_s ? fmt("%.2f", *row.predicted_tok_s).c_str() : "-", 100 * lo, 100 * hi);
      out += line;
    }
  }
  out += "\nper-layer hit rate (%), layers 0.." + std::to_string(r.n_layer ? r.n_layer - 1 : 0) + ":\n";
  for (const auto& row : r.rows) {
    char head[64];
    std::snprintf(head, sizeof head, "  %-6s %-11s", row.budget.label.c_str(), row.policy.c_str());
    out += head;
    for (double x : row.layer_hit_rates) out += fmt(" %3.0f", 100 * x);
    out += "\n";
  }
  bool any_gap = false;
  for (const auto& row : r.rows) any_gap = any_gap || (row.gap_to_belady && row.policy != "belady");
  if (any_gap) {
    out += "\ngap to belady (points of hit rate; per layer, weighted by accesses, they average to the total), layers 0.." +
           std::to_string(r.n_layer ? r.n_layer - 1 : 0) + ":\n";
    for (const auto& row : r.rows) {
      if (!row.gap_to_belady || row.policy == "belady") continue;
      char head[96];
      std::snprintf(head, sizeof head, "  %-6s %-11s total %5.1f |", row.budget.label.c_str(), row.policy.c_str(),
                    100 * *row.gap_to_belady);
      out += head;
      for (double x : row.layer_gaps_to_belady) out += fmt(" %5.1f", 100 * x);
      out += "\n";
    }
  }
  if (!r.recommendation.empty()) out += "\nrecommendation: " + r.recommendation + "\n";
  return out;
}

std::string format_tune_json(const TuneReport& r) {
  std::string out = "[";
  for (size_t i = 0; i < r.rows.size(); ++i) {
    const TuneRow& row = r.rows[i];
    out += i ? ",\n " : "\n ";
    out += "{\"policy\": \"" + row.policy + "\", \"budget_fraction\": " + fmt("%.6g", row.budget.fraction) +
           ", \"budget_bytes\": " +
           (row.budget.budget_bytes ? std::to_string(row.budget.budget_bytes) : std::string("null")) +
           ", \"hit_rate\": " + fmt("%.6g", row.hit_rate) +
           ", \"miss_bytes_per_token\": " + json_number(row.miss_bytes_per_token) +
           ", \"predicted_tok_s\": " + json_number(row.predicted_tok_s) +
           ", \"gap_to_belady\": " + json_number(row.gap_to_belady) +
           ", \"layer_hit_rates\": " + json_array(row.layer_hit_rates) + ", \"layer_gaps_to_belady\": " +
           (row.gap_to_belady ? json_array(row.layer_gaps_to_belady) : std::string("null")) + "}";
  }
  out += "\n]\n";
  return out;
}

}  // namespace sluice::cache
