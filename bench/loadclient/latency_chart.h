#pragma once
// Latency over time for runs of the same trace, side by side, as one self-contained SVG: TTFT
// p95 and p50 and E2E p50 per window of trace time, one line per run, stage starts marked. What
// a person looks at after `--compare`: where in the trace one strategy pulls ahead. Pure (no
// I/O); the caller reads requests.jsonl and writes the file.
#include <string>
#include <vector>

namespace llmd::loadclient {

// One answered request, in the units the chart draws: trace arrival in seconds and latencies in
// ms, both already multiplied by the run's time scale.
struct ChartSample {
  double at_s = 0;
  int stage = 0;
  double ttft_ms = 0;
  double e2e_ms = 0;
};

struct ChartRun {
  std::string label;
  std::vector<ChartSample> samples;  // any order
};

// Windows of `window_s` seconds (0: the trace's length / 30, at least 1 s); a window with fewer
// than 3 answered requests of a run leaves a gap in that run's line. Throws
// std::invalid_argument on no runs or a run without samples.
std::string latency_chart_svg(const std::vector<ChartRun>& runs, const std::string& title,
                              double window_s = 0);

}  // namespace llmd::loadclient
