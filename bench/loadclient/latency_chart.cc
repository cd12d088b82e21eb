#include "bench/loadclient/latency_chart.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>

#include "bench/loadclient/report.h"

namespace llmd::loadclient {
namespace {

constexpr double kWidth = 960, kLeft = 70, kRight = 190, kTop = 62, kPanelHeight = 190,
                 kPanelGap = 46, kBottom = 40;
constexpr int kMinPerWindow = 3;
constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c",
                                   "#9467bd", "#ff7f0e", "#8c564b"};

struct Panel {
  const char* title;
  std::function<double(const ChartSample&)> value;
  double quantile;
};

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// The smallest 1/2/5 x 10^k step that draws at most 5 grid lines up to `max`.
double nice_step(double max) {
  const double raw = std::max(max, 1e-9) / 5;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * magnitude >= raw) {
      return m * magnitude;
    }
  }
  return 10 * magnitude;
}

// Per window, the panel's quantile of the run's samples (nullopt: too few to say).
std::vector<std::optional<double>> series(const ChartRun& run, const Panel& panel, double window_s,
                                          std::size_t windows) {
  std::vector<std::vector<double>> buckets(windows);
  for (const auto& s : run.samples) {
    const auto w = static_cast<std::size_t>(std::max(0.0, s.at_s) / window_s);
    buckets[std::min(w, windows - 1)].push_back(panel.value(s));
  }
  std::vector<std::optional<double>> out(windows);
  for (std::size_t w = 0; w < windows; ++w) {
    if (static_cast<int>(buckets[w].size()) >= kMinPerWindow) {
      const Percentiles p = percentiles(std::move(buckets[w]));
      out[w] = panel.quantile == 0.95 ? p.p95 : p.p50;
    }
  }
  return out;
}

}  // namespace

std::string latency_chart_svg(const std::vector<ChartRun>& runs, const std::string& title,
                              double window_s) {
  if (runs.empty()) {
    throw std::invalid_argument("latency chart: no runs");
  }
  double end_s = 0;
  std::map<int, double> stage_start;  // the first arrival of each stage, over all runs
  for (const auto& run : runs) {
    if (run.samples.empty()) {
      throw std::invalid_argument("latency chart: run '" + run.label + "' has no answered request");
    }
    for (const auto& s : run.samples) {
      end_s = std::max(end_s, s.at_s);
      auto [it, added] = stage_start.emplace(s.stage, s.at_s);
      it->second = std::min(it->second, s.at_s);
    }
  }
  if (window_s <= 0) {
    window_s = std::max(1.0, end_s / 30);
  }
  const auto windows = static_cast<std::size_t>(end_s / window_s) + 1;
  const double span_s = static_cast<double>(windows) * window_s;
  const std::vector<Panel> panels = {
      {"TTFT p95 (ms)", [](const ChartSample& s) { return s.ttft_ms; }, 0.95},
      {"TTFT p50 (ms)", [](const ChartSample& s) { return s.ttft_ms; }, 0.5},
      {"E2E p50 (ms)", [](const ChartSample& s) { return s.e2e_ms; }, 0.5},
  };
  const double plot_w = kWidth - kLeft - kRight;
  const double height =
      kTop + static_cast<double>(panels.size()) * (kPanelHeight + kPanelGap) + kBottom - kPanelGap;
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} "
      "{1}\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{2}\" y=\"24\" font-size=\"15\" font-weight=\"bold\">{3}</text>\n",
      kWidth, height, kLeft, escape(title));
  auto x_of = [&](double s) { return kLeft + plot_w * s / span_s; };
  for (std::size_t p = 0; p < panels.size(); ++p) {
    const double top = kTop + static_cast<double>(p) * (kPanelHeight + kPanelGap);
    const double bottom = top + kPanelHeight;
    std::vector<std::vector<std::optional<double>>> lines;
    double max_value = 0;
    for (const auto& run : runs) {
      lines.push_back(series(run, panels[p], window_s, windows));
      for (const auto& v : lines.back()) {
        max_value = std::max(max_value, v.value_or(0));
      }
    }
    const double step = nice_step(max_value);
    const double y_max = std::max(step, std::ceil(max_value / step) * step);
    auto y_of = [&](double v) { return bottom - kPanelHeight * v / y_max; };
    svg += fmt::format("<text x=\"{}\" y=\"{}\" font-weight=\"bold\">{}</text>\n", kLeft, top - 8,
                       panels[p].title);
    for (double v = 0; v <= y_max + step / 2; v += step) {
      svg += fmt::format(
          "<line x1=\"{0}\" x2=\"{1}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\" stroke=\"#ddd\"/>"
          "<text x=\"{3}\" y=\"{4:.1f}\" text-anchor=\"end\">{5:g}</text>\n",
          kLeft, kLeft + plot_w, y_of(v), kLeft - 6, y_of(v) + 4, v);
    }
    for (const auto& [stage, at] : stage_start) {
      svg += fmt::format(
          "<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\" stroke=\"#999\" "
          "stroke-dasharray=\"4 3\"/>",
          x_of(at), top, bottom);
      if (p == 0) {
        svg += fmt::format("<text x=\"{:.1f}\" y=\"{}\" fill=\"#666\">stage {}</text>",
                           x_of(at) + 3, top + 12, stage + 1);
      }
      svg += "\n";
    }
    for (std::size_t r = 0; r < lines.size(); ++r) {
      std::string path;
      bool pen_down = false;
      for (std::size_t w = 0; w < windows; ++w) {
        if (!lines[r][w]) {
          pen_down = false;
          continue;
        }
        path += fmt::format("{}{:.1f},{:.1f} ", pen_down ? "L" : "M",
                            x_of((static_cast<double>(w) + 0.5) * window_s), y_of(*lines[r][w]));
        pen_down = true;
      }
      svg += fmt::format(
          "<path d=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\" "
          "stroke-linejoin=\"round\"/>\n",
          path, kColors[r % std::size(kColors)]);
    }
    svg += fmt::format(
        "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" "
        "stroke=\"#333\"/>\n",
        kLeft, top, plot_w, kPanelHeight);
  }
  const double axis_y = height - kBottom + 14;
  const double x_step = nice_step(span_s);
  for (double s = 0; s <= span_s + x_step / 2; s += x_step) {
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{:g}</text>\n", x_of(s),
                       axis_y, s);
  }
  svg += fmt::format(
      "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">trace time (s), windows of {:g} s</text>\n",
      kLeft + plot_w / 2, axis_y + 18, window_s);
  for (std::size_t r = 0; r < runs.size(); ++r) {
    const double y = kTop + 10 + static_cast<double>(r) * 20;
    svg += fmt::format(
        "<line x1=\"{0}\" x2=\"{1}\" y1=\"{2}\" y2=\"{2}\" stroke=\"{3}\" stroke-width=\"3\"/>"
        "<text x=\"{4}\" y=\"{5}\">{6}</text>\n",
        kWidth - kRight + 14, kWidth - kRight + 38, y, kColors[r % std::size(kColors)],
        kWidth - kRight + 44, y + 4, escape(runs[r].label));
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace llmd::loadclient
