#pragma once
// bench/epp_overhead's Markdown report, from the run's JSON (the same object that goes into
// epp_overhead.json), so the two never disagree.
#include <iterator>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace llmd::bench {

// The tail split of a step (Json "tail"): the share of requests over a bound end to end and,
// for the EPP's phases, the share of its histogram's observations over it. `metric` is empty
// for the client's own view; the bound is a histogram bucket boundary for the others.
struct TailColumn {
  const char* key;
  const char* label;
  const char* metric;
  double bound_ms;
};
inline constexpr TailColumn kTailColumns[] = {
    {"client_over_2ms_pct", "client >2 ms", "", 2},
    {"client_over_5ms_pct", ">5 ms", "", 5},
    {"dispatch_delay_over_2ms_pct", "arrival->dispatch >2 ms", "llmd_epp_dispatch_delay_seconds",
     2},
    {"dispatch_delay_over_5ms_pct", ">5 ms", "llmd_epp_dispatch_delay_seconds", 5},
    {"scheduling_over_2_5ms_pct", "scheduling >2.5 ms", "llmd_epp_scheduling_duration_seconds",
     2.5},
    {"scheduling_over_5ms_pct", ">5 ms", "llmd_epp_scheduling_duration_seconds", 5},
    {"predictor_rtt_over_2ms_pct", "predictor round trip >2 ms",
     "llmd_epp_predictor_dispatch_seconds", 2},
    {"predictor_rtt_over_5ms_pct", ">5 ms", "llmd_epp_predictor_dispatch_seconds", 5},
    // A cycle's whole wait for its predictions (window, call slot, round trip).
    {"prediction_wait_over_2ms_pct", "prediction wait >2 ms", "llmd_epp_predictor_wait_seconds", 2},
    {"prediction_wait_over_5ms_pct", ">5 ms", "llmd_epp_predictor_wait_seconds", 5},
    // Arrival at the EPP to the pod's last byte (the duration histogram has no 2-ms bucket): it
    // holds the forward and the pod too, so what the client sees over 5 ms and this does not
    // happened before the EPP had read the request.
    {"in_epp_over_5ms_pct", "arrival->pod's answer >5 ms",
     "inference_objective_request_duration_seconds", 5}};

// "label x% label y% ..." or a Markdown row's cells "| x% | y% ..." of one step's tail.
inline std::string tail_cells(const nlohmann::json& tail, bool markdown) {
  std::string out;
  for (const auto& c : kTailColumns) {
    if (!tail.contains(c.key)) {  // a run stored before the column existed
      out += markdown ? " - |" : fmt::format(" {} -", c.label);
      continue;
    }
    const double v = tail.at(c.key).get<double>();
    out += markdown ? fmt::format(" {:.2f}% |", v) : fmt::format(" {} {:.2f}%", c.label, v);
  }
  return out;
}

// The command that made `run` (runs stored before it was recorded: the defaults' command).
inline std::string epp_overhead_command(const nlohmann::json& run) {
  if (run.contains("command")) {
    return run["command"].get<std::string>();
  }
  const bool in_process = run.value("in_process", false);
  return "build/bench/epp_overhead --label " + run["label"].get<std::string>() +
         (in_process ? " --in-process true --out bench/results/epp_overhead_in_process" : "");
}

inline std::string epp_overhead_markdown(const nlohmann::json& run) {
  using Json = nlohmann::json;
  const double limit = run["capacity_p99_ms"].get<double>();
  std::string md = fmt::format(
      "# EPP added latency and capacity (proxy and ext_proc)\n\n"
      "Run **{}**{}: {} on {} cores ({}). Made by `{}` (from the repository root, Release "
      "build; `bench/run_reports.sh overhead` runs both committed files).\n\n"
      "- *proxy*: client send -> the picked fake pod receives the forwarded request (parse, "
      "schedule incl. the coalesced prediction round trip, forward). Fake pods (in the load "
      "generator's process) answer instantly.\n"
      "- *ext_proc*: the load generator plays Envoy on the EPP's gRPC port (FULL_DUPLEX_STREAMED, "
      "one stream per request over {} HTTP/2 connections, "
      "`bench/epp_overhead/epp_overhead_extproc.h`): request "
      "headers + body "
      "written -> the answer carrying `x-gateway-destination-endpoint` arrives. Then response "
      "headers and body are played so the EPP closes the request; no upstream in this path.\n\n"
      "{} with a trained 200-tree model; a prediction for every candidate pod "
      "of every request. Open loop: requests leave on schedule whatever the earlier ones do; the "
      "first 0.3 s of a step is sent but not counted. The load generator, the EPP, the predictors "
      "and the fake pods share the same cores. {} s per fixed-rate step.\n\n"
      "*CPU us/req*: utime+stime from `/proc/<pid>/stat` before and after the step, over the "
      "requests sent; *client* is the load generator's process minus the fake pods' threads. "
      "*predictor bytes/req*: what the predictors' connections received / sent (the kernel's "
      "tcp_info, read over NETLINK_SOCK_DIAG in the load generator) over "
      "the requests sent: the prediction exchange with its HTTP headers. "
      "*EPP threads*: `/proc/<epp pid>/task`, idle before the step / the most seen during it.\n\n"
      "## Fixed rates\n\n"
      "| mode | pods | offered rps | achieved rps | p50 ms | p90 ms | p99 ms | errors | rows/batch "
      "| "
      "callers/batch | predictions used | EPP CPU us/req | predictors CPU us/req | "
      "predictor bytes/req in / out | EPP threads |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
      run["label"].get<std::string>(), run["quick"].get<bool>() ? " (--quick)" : "",
      run["date"].get<std::string>(), run["cores"].get<unsigned>(), run["cpu"].get<std::string>(),
      epp_overhead_command(run), run["ext_proc_channels"].get<int>(),
      run.value("in_process", false)
          ? std::string("Predictions in the EPP (`--in-process-predictions`, no predictor)")
          : fmt::format("{} predictor replicas", run["predictors"].get<std::size_t>()),
      run["step_s"].get<double>());
  for (const Json& s : run["steps"]) {
    // Runs stored before the byte counts existed have none.
    const Json bytes = s.value("predictor_bytes_per_request", Json{{"in", 0.0}, {"out", 0.0}});
    md += fmt::format(
        "| {} | {} | {:.0f} | {:.0f} | {:.3f} | {:.3f} | {:.3f} | {} | {:.0f} | {:.1f} | "
        "{:.0f}% | {:.0f} | {:.0f} | {:.0f} / {:.0f} | {} / {} |\n",
        s["mode"].get<std::string>(), s["pods"].get<int>(), s["offered_rps"].get<double>(),
        s["achieved_rps"].get<double>(), s["p50_ms"].get<double>(), s["p90_ms"].get<double>(),
        s["p99_ms"].get<double>(), s["errors"].get<uint64_t>() + s["unfinished"].get<uint64_t>(),
        s["rows_per_batch"].get<double>(), s["callers_per_batch"].get<double>(),
        s["predictions_used_pct"].get<double>(), s["cpu_us_per_request"]["epp"].get<double>(),
        s["cpu_us_per_request"]["predictors"].get<double>(), bytes["in"].get<double>(),
        bytes["out"].get<double>(), s["epp_threads_idle"].get<int>(),
        s["epp_threads_peak"].get<int>());
  }
  md +=
      "\n### Where the tail is spent\n\n"
      "Share of the counted requests over 2 and 5 ms from the client's send to the pod's receipt, "
      "against the share of the EPP's internal phases over the same bounds (from its histograms): "
      "arrival at the EPP (request read) -> dispatch to the pod, the scheduling cycle (with the "
      "prediction wait), one predictor round trip (per batch), a request's whole wait for its "
      "predictions (coalescing window, call slot, round trip), and arrival -> the pod's answer "
      "(forward and pod included). Client tail over 5 ms that the last does not show was spent "
      "before the EPP had read the request.\n\n"
      "| mode | pods | offered rps |";
  for (const auto& c : kTailColumns) {
    md += fmt::format(" {} |", c.label);
  }
  md += "\n|---|---|---|";
  for (std::size_t i = 0; i < std::size(kTailColumns); ++i) {
    md += "---|";
  }
  md += "\n";
  for (const Json& s : run["steps"]) {
    if (!s.contains("tail")) {
      continue;  // runs stored before the tail split existed
    }
    md += fmt::format("| {} | {} | {:.0f} |", s["mode"].get<std::string>(), s["pods"].get<int>(),
                      s["offered_rps"].get<double>()) +
          tail_cells(s["tail"], true) + "\n";
  }
  md += fmt::format(
      "\n## Capacity: the highest offered rate with p99 <= {} ms\n\n"
      "Doubling from the first rate while steps pass, then bisecting (to 100 req/s) between the "
      "last pass and the first failure; {} s per step. A step passes when p99 <= {} ms, no "
      "errors, >= 95 % of the offered rate completed and the load generator kept its schedule "
      "(p99 lateness <= {} ms). *cores*: CPU seconds per wall second during that step; *EPP "
      "idle*: its cores with no requests (scraping the pool, tickers), measured for 1 s before "
      "the steps, which the us/req column spreads over the requests.\n\n"
      "| mode | pods | capacity rps | p50 ms | p99 ms | CPU us/req EPP / predictors / client | "
      "cores EPP / predictors / pods / client / whole machine | EPP idle cores | "
      "next rate tried failed on |\n"
      "|---|---|---|---|---|---|---|---|---|\n",
      limit, run["capacity_step_s"].get<double>(), limit, limit);
  for (const Json& c : run["capacity"]) {
    const Json& s = c["step"];
    std::string next = "-";
    double next_rate = 1e18;
    for (const Json& t : run["capacity_search"]) {
      const double r = t["offered_rps"].get<double>();
      if (t["mode"] == c["mode"] && r > c["capacity_rps"].get<double>() && r < next_rate) {
        next_rate = r;
        next = fmt::format("{:.0f}: {}", r, t["verdict"].get<std::string>());
      }
    }
    if (s.is_null()) {
      md += fmt::format("| {} | {} | none passed | | | | | | {} |\n", c["mode"].get<std::string>(),
                        c["pods"].get<int>(), next);
      continue;
    }
    const Json& us = s["cpu_us_per_request"];
    const Json& cores = s["cpu_cores"];
    md += fmt::format(
        "| {} | {} | {}{:.0f} | {:.3f} | {:.3f} | {:.0f} / {:.0f} / {:.0f} | "
        "{:.2f} / {:.2f} / {:.2f} / {:.2f} / {:.2f} | {:.2f} | {} |\n",
        c["mode"].get<std::string>(), c["pods"].get<int>(),
        c["capped_by_max"].get<bool>() ? ">= " : "", c["capacity_rps"].get<double>(),
        s["p50_ms"].get<double>(), s["p99_ms"].get<double>(), us["epp"].get<double>(),
        us["predictors"].get<double>(), us["client"].get<double>(), cores["epp"].get<double>(),
        cores["predictors"].get<double>(), cores["pods"].get<double>(),
        cores["client"].get<double>(), cores["machine"].get<double>(),
        s["epp_idle_cores"].get<double>(), next);
  }
  md +=
      "\n### Search steps\n\n"
      "| mode | offered rps | achieved rps | p50 ms | p99 ms | errors | not sent (in-flight cap) | "
      "client late p99 ms | CPU us/req EPP / client | cores EPP / client / machine | failed on |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const Json& s : run["capacity_search"]) {
    const Json& us = s["cpu_us_per_request"];
    const Json& cores = s["cpu_cores"];
    const std::string v = s["verdict"].get<std::string>();
    md += fmt::format(
        "| {} | {:.0f} | {:.0f} | {:.3f} | {:.3f} | {} | {} | {:.2f} | {:.0f} / {:.0f} | "
        "{:.2f} / {:.2f} / {:.2f} | {} |\n",
        s["mode"].get<std::string>(), s["offered_rps"].get<double>(),
        s["achieved_rps"].get<double>(), s["p50_ms"].get<double>(), s["p99_ms"].get<double>(),
        s["errors"].get<uint64_t>() + s["unfinished"].get<uint64_t>(), s["shed"].get<uint64_t>(),
        s["client_late_p99_ms"].get<double>(), us["epp"].get<double>(), us["client"].get<double>(),
        cores["epp"].get<double>(), cores["client"].get<double>(), cores["machine"].get<double>(),
        v.empty() ? "(passed)" : v);
  }
  return md;
}

}  // namespace llmd::bench
