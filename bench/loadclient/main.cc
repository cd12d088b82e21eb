// loadclient: replays a seeded workload preset against an OpenAI-compatible URL (the EPP or a
// modelsim pod) and writes summary.json and requests.jsonl to --out-dir. Loopback only; bounded
// by --max-requests and --max-duration-s. All logic is in llmd_loadclient; this file only
// parses flags and writes files.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "bench/loadclient/latency_chart.h"
#include "bench/loadclient/load_runner.h"
#include "bench/loadclient/report.h"
#include "bench/workload/workload.h"
#include "common/config/logging.h"
#include "common/config/options.h"

using namespace llmd;

namespace {

void add_options(config::Options& o) {
  o.add("url", "LOADCLIENT_URL", "http://127.0.0.1:8080",
        "Base URL of the target (EPP or pod); loopback addresses only");
  o.add("workload", "LOADCLIENT_WORKLOAD", "A", "Preset: A, B, C, D, sharegpt, production");
  o.add("seed", "LOADCLIENT_SEED", "1", "Workload seed (same seed, same trace)");
  o.add("stages", "LOADCLIENT_STAGES", "",
        "Poisson stages 'rate:duration_s,...' (default: the preset's ladder)");
  o.add("rate-scale", "LOADCLIENT_RATE_SCALE", "1", "Multiplies every stage rate");
  o.add("length-scale", "LOADCLIENT_LENGTH_SCALE", "1",
        "Multiplies system prompt, question and output lengths (shrink runs to fit the machine)");
  o.add("api", "LOADCLIENT_API", "completions", "completions | chat");
  o.add("model", "LOADCLIENT_MODEL", "meta-llama/Llama-3.1-8B-Instruct", "Model name sent");
  o.add_flag("stream", "LOADCLIENT_STREAM", true, "Stream responses (SSE) with usage");
  o.add("max-requests", "LOADCLIENT_MAX_REQUESTS", "1000", "Cap on requests sent");
  o.add("max-duration-s", "LOADCLIENT_MAX_DURATION_S", "600",
        "Wall-clock cap; running requests are aborted after it");
  o.add("request-timeout-s", "LOADCLIENT_REQUEST_TIMEOUT_S", "300", "Per-request timeout");
  o.add("max-in-flight", "LOADCLIENT_MAX_IN_FLIGHT", "256", "Concurrent requests/connections");
  o.add("headers", "LOADCLIENT_HEADERS", "",
        "Extra headers for every request, 'name: value;name: value'");
  o.add("slo-ttft-ms", "LOADCLIENT_SLO_TTFT_MS", "", "Adds x-slo-ttft-ms to every request");
  o.add("slo-tpot-ms", "LOADCLIENT_SLO_TPOT_MS", "", "Adds x-slo-tpot-ms to every request");
  o.add("sheddable-fraction", "LOADCLIENT_SHEDDABLE_FRACTION", "0",
        "Share of requests sent with priority -1 (nvext.agent_hints.priority)");
  o.add_flag("vllm-priority", "LOADCLIENT_VLLM_PRIORITY", false,
             "Also send vLLM's `priority` field (negated: lower is served first)");
  o.add("time-scale", "LOADCLIENT_TIME_SCALE", "1",
        "Multiply latencies by this in summary.json (the modelsim --time-scale of the target)");
  o.add("out-dir", "LOADCLIENT_OUT_DIR", "loadclient-out", "Where summary.json/requests.jsonl go");
  o.add("compare", "LOADCLIENT_COMPARE", "",
        "Send nothing: print a side-by-side table of earlier runs, 'label=out-dir,label=out-dir' "
        "(each out-dir's summary.json)");
  o.add("chart", "LOADCLIENT_CHART", "",
        "With --compare: also write latency over time per run (each out-dir's requests.jsonl) "
        "as an SVG to this file");
  o.add("log-level", "LOG_LEVEL", "info", "trace | debug | info | warn | error");
}

// The answered requests of one run's requests.jsonl, scaled as its summary is.
loadclient::ChartRun chart_run(const std::string& label, const std::filesystem::path& dir,
                               double time_scale) {
  const std::filesystem::path file = dir / "requests.jsonl";
  std::ifstream in(file);
  if (!in) {
    throw std::invalid_argument("--chart: cannot read " + file.string());
  }
  loadclient::ChartRun run{label, {}};
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const nlohmann::json r = nlohmann::json::parse(line, nullptr, false);
    if (r.is_discarded() || !r.is_object()) {
      throw std::invalid_argument(
          fmt::format("--chart: {} line {} is not a JSON object", file.string(), number));
    }
    if (!r.value("ok", false) || !r.contains("ttft_ms") || !r.contains("e2e_ms")) {
      continue;
    }
    run.samples.push_back({r.value("scheduled_ms", 0.0) * time_scale / 1000.0, r.value("stage", 0),
                           r["ttft_ms"].get<double>() * time_scale,
                           r["e2e_ms"].get<double>() * time_scale});
  }
  return run;
}

// --compare: the runs' summaries side by side (and with --chart, their latency over time).
int compare(const std::string& list, const std::string& chart_file) {
  std::vector<std::pair<std::string, nlohmann::json>> runs;
  std::vector<loadclient::ChartRun> charted;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw std::invalid_argument("--compare: '" + item + "' is not 'label=out-dir'");
    }
    const std::filesystem::path dir(item.substr(eq + 1));
    const std::filesystem::path file = dir / "summary.json";
    std::ifstream in(file);
    nlohmann::json summary = nlohmann::json::parse(in, nullptr, false);
    if (!in || summary.is_discarded()) {
      throw std::invalid_argument("--compare: cannot read " + file.string());
    }
    if (!chart_file.empty()) {
      const double scale =
          summary.contains("info") ? summary["info"].value("time_scale", 1.0) : 1.0;
      charted.push_back(chart_run(item.substr(0, eq), dir, scale));
    }
    runs.emplace_back(item.substr(0, eq), std::move(summary));
  }
  std::fputs(loadclient::comparison_table(runs).c_str(), stdout);
  if (!chart_file.empty()) {
    const auto& info = runs.front().second.contains("info") ? runs.front().second["info"]
                                                            : nlohmann::json::object();
    const std::string title =
        fmt::format("The same trace through each strategy: workload {}, seed {}, stages {}",
                    info.value("workload", "?"), info.value("seed", 0), info.value("stages", "?"));
    std::ofstream out(chart_file);
    out << loadclient::latency_chart_svg(charted, title);
    if (!out) {
      throw std::invalid_argument("--chart: cannot write " + chart_file);
    }
  }
  return 0;
}

std::vector<http::Header> parse_headers(const std::string& text) {
  std::vector<http::Header> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ';')) {
    const auto colon = item.find(':');
    if (colon == std::string::npos) {
      if (item.find_first_not_of(' ') == std::string::npos) {
        continue;
      }
      throw std::invalid_argument("--headers: '" + item + "' is not 'name: value'");
    }
    auto trim = [](std::string s) {
      s.erase(0, s.find_first_not_of(' '));
      s.erase(s.find_last_not_of(' ') + 1);
      return s;
    };
    out.push_back({trim(item.substr(0, colon)), trim(item.substr(colon + 1))});
  }
  return out;
}

int run(int argc, char** argv) {
  config::Options o("loadclient", "Streaming load client for OpenAI-compatible servers");
  add_options(o);
  if (!o.parse(argc, argv)) {
    return 0;
  }
  config::init_logging(o.str("log-level"), "loadclient");
  if (!o.str("compare").empty()) {
    return compare(o.str("compare"), o.str("chart"));
  }
  if (!o.str("chart").empty()) {
    throw std::invalid_argument("--chart draws earlier runs: give it with --compare");
  }
  auto spec = workload::preset(o.str("workload"));
  if (!spec) {
    throw std::invalid_argument("--workload: unknown preset '" + o.str("workload") + "'");
  }
  workload::GenerateOptions gen;
  gen.seed = static_cast<uint64_t>(o.integer("seed", 0));
  if (!o.str("stages").empty()) {
    std::string err;
    auto stages = workload::parse_stages(o.str("stages"), &err);
    if (!stages) {
      throw std::invalid_argument("--stages: " + err);
    }
    gen.stages = *stages;
  }
  gen.rate_scale = o.number("rate-scale", 1e-6, 1e6);
  gen.length_scale = o.number("length-scale", 1e-4, 100);
  gen.max_requests = o.integer("max-requests", 1, 10'000'000);
  if (!o.str("slo-ttft-ms").empty()) {
    gen.slo_ttft_ms = o.number("slo-ttft-ms", 0);
  }
  if (!o.str("slo-tpot-ms").empty()) {
    gen.slo_tpot_ms = o.number("slo-tpot-ms", 0);
  }
  gen.sheddable_fraction = o.number("sheddable-fraction", 0, 1);
  const workload::Trace trace = workload::generate(*spec, gen);

  loadclient::RunnerConfig cfg;
  cfg.url = o.str("url");
  auto api = loadclient::parse_api(o.str("api"));
  if (!api) {
    throw std::invalid_argument("--api: expected completions or chat, got '" + o.str("api") + "'");
  }
  cfg.request.api = *api;
  cfg.request.model = o.str("model");
  cfg.request.stream = o.boolean("stream");
  cfg.request.vllm_priority = o.boolean("vllm-priority");
  cfg.headers = parse_headers(o.str("headers"));
  cfg.max_requests = gen.max_requests;
  cfg.max_duration_s = o.number("max-duration-s", 0.001, 86400);
  cfg.request_timeout_s = o.number("request-timeout-s", 0.001, 86400);
  cfg.max_in_flight = static_cast<int>(o.integer("max-in-flight", 1, 4096));
  const double time_scale = o.number("time-scale", 1e-6, 1e6);

  const std::filesystem::path out_dir = o.str("out-dir");
  std::filesystem::create_directories(out_dir);
  spdlog::info("loadclient: {} requests of workload {} (stages {}) -> {}", trace.requests.size(),
               spec->name, workload::format_stages(trace.stages), cfg.url);
  int64_t done = 0;
  auto result = loadclient::run_load(trace, cfg, [&done](const loadclient::RequestRecord& r) {
    if (++done % 100 == 0) {
      spdlog::info("loadclient: {} requests done", done);
    }
    if (!r.ok) {
      spdlog::debug("loadclient: request {} failed: {}", r.index, r.error);
    }
  });

  loadclient::SummaryInfo info;
  info.target = cfg.url;
  info.workload = spec->name;
  info.seed = gen.seed;
  info.time_scale = time_scale;
  info.wall_ms = result.wall_ms;
  info.not_sent = result.not_sent;
  info.stopped_by_wall_cap = result.stopped_by_wall_cap;
  const auto summary = loadclient::summarize(result.records, trace.stages, info);
  {
    std::ofstream f(out_dir / "summary.json");
    f << summary.dump(2) << "\n";
  }
  {
    std::ofstream f(out_dir / "requests.jsonl");
    for (const auto& r : result.records) {
      f << loadclient::to_json(r).dump() << "\n";
    }
  }
  const auto& all = summary["overall"];
  std::printf(
      "requests %lld, success %.3f, TTFT p50 %.1f ms p99 %.1f ms, TPOT p50 %.2f ms, "
      "output %.0f tok/s, prefix hit %.2f -> %s\n",
      static_cast<long long>(all["requests"].get<int64_t>()), all["success_rate"].get<double>(),
      all["ttft_ms"]["p50"].get<double>(), all["ttft_ms"]["p99"].get<double>(),
      all["tpot_ms"]["p50"].get<double>(), all["output_tokens_per_s"].get<double>(),
      all["prefix_cache_hit_ratio"].get<double>(), out_dir.string().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loadclient: %s\n", e.what());
    return 2;
  }
}
