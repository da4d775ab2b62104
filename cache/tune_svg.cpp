// SVG plot for `sluice tune --plot`: hand-written, no dependencies.
#include <algorithm>
#include <cstdio>

#include "cache/tune.h"

namespace sluice::cache {

std::string format_tune_svg(const TuneReport& r) {
  static const char* const kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                        "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
  const double W = 640, H = 420, left = 60, right = 150, top = 30, bottom = 50;
  const double pw = W - left - right, ph = H - top - bottom;
  double xmax = 0;
  for (const auto& b : r.budgets) xmax = std::max(xmax, b.fraction);
  if (xmax <= 0) xmax = 1;
  auto X = [&](double f) { return left + pw * f / xmax; };
  auto Y = [&](double h) { return top + ph * (1 - h); };
  char buf[512];
  std::string s;
  std::snprintf(buf, sizeof buf,
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
                "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
                W, H);
  s += buf;
  std::snprintf(buf, sizeof buf, "<text x=\"%.0f\" y=\"18\" font-size=\"14\">%s: hit rate vs cache budget</text>\n",
                left, r.model.c_str());
  s += buf;
  for (int i = 0; i <= 10; i += 2) {  // y grid
    double h = i / 10.0;
    std::snprintf(buf, sizeof buf,
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                  "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%d%%</text>\n",
                  left, Y(h), left + pw, Y(h), left - 6, Y(h) + 4, i * 10);
    s += buf;
  }
  for (const auto& b : r.budgets) {  // x ticks
    std::snprintf(buf, sizeof buf,
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                  "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.0f%%</text>\n",
                  X(b.fraction), top, X(b.fraction), top + ph, X(b.fraction), top + ph + 16, 100 * b.fraction);
    s += buf;
  }
  std::snprintf(buf, sizeof buf,
                "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"black\"/>\n"
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">experts cached (share of all routed experts)</text>\n"
                "<text transform=\"translate(16,%.1f) rotate(-90)\" text-anchor=\"middle\">hit rate</text>\n",
                left, top, pw, ph, left + pw / 2, H - 12, top + ph / 2);
  s += buf;
  std::vector<std::string> policies;
  for (const auto& row : r.rows) {
    if (std::find(policies.begin(), policies.end(), row.policy) == policies.end()) policies.push_back(row.policy);
  }
  for (size_t pi = 0; pi < policies.size(); ++pi) {
    const char* color = kColors[pi % 10];
    bool dashed = false;
    std::string points;
    for (size_t bi = 0; bi < r.budgets.size(); ++bi) {
      const TuneRow* row = r.find(policies[pi], bi);
      if (!row) continue;
      dashed = row->clairvoyant;
      std::snprintf(buf, sizeof buf, "%.1f,%.1f ", X(row->budget.fraction), Y(row->hit_rate));
      points += buf;
    }
    std::snprintf(buf, sizeof buf, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"%s\"/>\n",
                  color, dashed ? " stroke-dasharray=\"6,4\"" : "", points.c_str());
    s += buf;
    double ly = top + 10 + 18 * pi;
    std::snprintf(buf, sizeof buf,
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"%s/>"
                  "<text x=\"%.1f\" y=\"%.1f\">%s</text>\n",
                  left + pw + 12, ly, left + pw + 40, ly, color, dashed ? " stroke-dasharray=\"6,4\"" : "",
                  left + pw + 46, ly + 4, policies[pi].c_str());
    s += buf;
  }
  s += "</svg>\n";
  return s;
}

}  // namespace sluice::cache
