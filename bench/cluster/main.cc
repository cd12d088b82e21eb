// cluster_sim: the routing-quality benchmark in virtual time (shared/spec/simulator.md section 5).
// Runs every scenario under every strategy on identical arrivals, in parallel over --threads
// (each run is single-threaded and deterministic), then writes CSVs and report.md to --out-dir.
// bench/cluster/run_report.sh builds, runs and renders the plots; see bench/cluster/README.md.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>
#include <thread>

#include <unistd.h>

#include <cxxopts.hpp>
#include <spdlog/spdlog.h>

#include "bench/cluster/cluster_sim.h"
#include "bench/cluster/report.h"
#include "bench/cluster/scenarios.h"

using namespace llmd;
using namespace llmd::cluster;

namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep)) {
    if (!item.empty()) {
      out.push_back(item);
    }
  }
  return out;
}

std::string machine_line() {
  std::string model;
  std::ifstream cpu("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpu, line)) {
    if (line.rfind("model name", 0) == 0) {
      model = line.substr(line.find(':') + 2);
      break;
    }
  }
  return std::to_string(std::thread::hardware_concurrency()) + " CPUs, " + model;
}

// The oracle's probes copy whole engines: tens of thousands of small nodes and a few large
// arrays per probe. With glibc's defaults that goes through slow bins and mmap/munmap (a page
// fault per touched page on every copy); a larger per-thread cache and heap allocation up to
// 32 MiB make the oracle several times faster. Results do not depend on it. Re-executes once
// with these tunables unless the caller set GLIBC_TUNABLES (set it to anything to opt out).
void reexec_with_malloc_tunables(char** argv) {
  if (std::getenv("GLIBC_TUNABLES") != nullptr) {
    return;
  }
  ::setenv("GLIBC_TUNABLES",
           "glibc.malloc.tcache_count=65000:glibc.malloc.mmap_threshold=33554432:"
           "glibc.malloc.trim_threshold=1073741824",
           1);
  ::execv("/proc/self/exe", argv);
  ::unsetenv("GLIBC_TUNABLES");  // exec failed: carry on with the defaults
}

}  // namespace

int main(int argc, char** argv) {
  reexec_with_malloc_tunables(argv);
  cxxopts::Options opts("cluster_sim", "Virtual-time routing benchmark over simulated vLLM pods");
  // clang-format off
  opts.add_options()
    ("out-dir", "Output directory", cxxopts::value<std::string>()->default_value("bench/results/routing"))
    ("scenarios", "Comma list of scenario names, or 'all'", cxxopts::value<std::string>()->default_value("all"))
    ("strategies", "Comma list (rr, lp111, lp322, pl_least, pl_most, oracle) or 'all'", cxxopts::value<std::string>()->default_value("all"))
    ("threads", "Runs in parallel", cxxopts::value<int>()->default_value("2"))
    ("seed", "Seed of traces, engines and scheduling", cxxopts::value<uint64_t>()->default_value("1"))
    ("quick", "Small pools and short stages (smoke test)")
    ("epp-config-dir", "Directory of the EPP pipeline YAML files", cxxopts::value<std::string>()->default_value(LLMD_SOURCE_DIR "/epp/config"))
    ("oracle-probes", "Oracle: max pods probed per request (0 = all)", cxxopts::value<int>()->default_value("2"))
    ("oracle-horizon-ms", "Oracle: cap on one probe's simulated time (0 = none)", cxxopts::value<double>()->default_value("1000"))
    ("scrape-ms", "Metrics refresh period (0 = exact metrics per decision)", cxxopts::value<double>()->default_value("50"))
    ("timeout-s", "Client timeout per request (virtual seconds)", cxxopts::value<double>()->default_value("60"))
    ("preset", "Custom scenario: workload preset (replaces --scenarios)", cxxopts::value<std::string>()->default_value(""))
    ("stages", "Custom scenario: rate:duration_s,...", cxxopts::value<std::string>()->default_value(""))
    ("pods", "Custom scenario: pool size", cxxopts::value<int>()->default_value("10"))
    ("slow-pods", "Custom scenario: pods on the slow profile", cxxopts::value<int>()->default_value("0"))
    ("length-scale", "Custom scenario: sequence length scale (KV capacity scales with it)", cxxopts::value<double>()->default_value("0.1"))
    ("slo-ttft-ms", "Custom scenario: x-slo-ttft-ms", cxxopts::value<double>())
    ("slo-tpot-ms", "Custom scenario: x-slo-tpot-ms", cxxopts::value<double>())
    ("hash-prompts", "auto | always | never: give engines the prompts' block hashes", cxxopts::value<std::string>()->default_value("auto"))
    ("pipeline-file", "Ablation: use this pipeline YAML instead of the strategies' own", cxxopts::value<std::string>()->default_value(""))
    ("no-report", "Print summaries only")
    ("h,help", "Help");
  // clang-format on
  cxxopts::ParseResult args;
  try {
    args = opts.parse(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 2;
  }
  if (args.count("help")) {
    std::cout << opts.help() << "\n";
    return 0;
  }
  spdlog::set_level(spdlog::level::warn);
  const uint64_t seed = args["seed"].as<uint64_t>();
  const std::string epp_dir = args["epp-config-dir"].as<std::string>();

  std::vector<Scenario> scenarios;
  if (!args["preset"].as<std::string>().empty()) {
    Scenario s;
    s.name = "custom";
    s.preset = args["preset"].as<std::string>();
    s.title = "custom: preset " + s.preset;
    std::string err;
    auto st = workload::parse_stages(args["stages"].as<std::string>(), &err);
    if (!st) {
      std::cerr << "--stages: " << err << "\n";
      return 2;
    }
    s.stages = *st;
    s.pool.num_pods = args["pods"].as<int>();
    s.pool.num_slow = args["slow-pods"].as<int>();
    s.length_scale = args["length-scale"].as<double>();
    if (args.count("slo-ttft-ms")) s.slo_ttft_ms = args["slo-ttft-ms"].as<double>();
    if (args.count("slo-tpot-ms")) s.slo_tpot_ms = args["slo-tpot-ms"].as<double>();
    scenarios.push_back(s);
  } else {
    auto all = default_scenarios(args.count("quick") > 0);
    const std::string want = args["scenarios"].as<std::string>();
    if (want == "all") {
      scenarios = all;
    } else {
      for (const auto& name : split(want, ',')) {
        bool found = false;
        for (const auto& s : all) {
          if (s.name == name) {
            scenarios.push_back(s);
            found = true;
          }
        }
        if (!found) {
          std::cerr << "unknown scenario " << name << "\n";
          return 2;
        }
      }
    }
  }
  for (auto& s : scenarios) {
    s.seed = seed;
  }
  std::vector<Strategy> strategies;
  if (args["strategies"].as<std::string>() == "all") {
    strategies.assign(kAllStrategies.begin(), kAllStrategies.end());
  } else {
    for (const auto& k : split(args["strategies"].as<std::string>(), ',')) {
      auto s = parse_strategy(k);
      if (!s) {
        std::cerr << "unknown strategy " << k << "\n";
        return 2;
      }
      strategies.push_back(*s);
    }
  }

  std::string pipeline_override;
  if (const std::string pf = args["pipeline-file"].as<std::string>(); !pf.empty()) {
    std::ifstream in(pf);
    if (!in) {
      std::cerr << "cannot read " << pf << "\n";
      return 2;
    }
    std::ostringstream ss;
    ss << in.rdbuf();
    pipeline_override = ss.str();
  }
  std::vector<ScenarioRuns> all(scenarios.size());
  struct Job {
    std::size_t scenario;
    std::size_t strategy;
  };
  std::vector<Job> jobs;
  for (std::size_t i = 0; i < scenarios.size(); ++i) {
    all[i].scenario = scenarios[i];
    all[i].trace = make_trace(scenarios[i]);
    all[i].runs.resize(strategies.size());
    all[i].summaries.resize(strategies.size());
    const auto& only = scenarios[i].strategies;
    for (std::size_t k = 0; k < strategies.size(); ++k) {
      all[i].runs[k].strategy = strategies[k];
      if (only.empty() || std::find(only.begin(), only.end(), strategies[k]) != only.end()) {
        jobs.push_back({i, k});
      }
    }
  }
  // Expensive runs first so the two workers finish together.
  auto cost = [&](const Job& j) {
    Strategy s = strategies[j.strategy];
    return s == Strategy::kOracle ? 3 : uses_predictions(s) ? 2 : 1;
  };
  std::stable_sort(jobs.begin(), jobs.end(),
                   [&](const Job& a, const Job& b) { return cost(a) > cost(b); });

  const auto t0 = std::chrono::steady_clock::now();
  std::atomic<std::size_t> next{0};
  std::mutex out_mu;
  std::atomic<bool> failed{false};
  auto worker = [&] {
    while (true) {
      const std::size_t j = next.fetch_add(1);
      if (j >= jobs.size() || failed) {
        return;
      }
      const Job job = jobs[j];
      auto& sr = all[job.scenario];
      RunConfig cfg = make_run_config(sr.scenario, strategies[job.strategy], epp_dir);
      cfg.oracle_max_probes = args["oracle-probes"].as<int>();
      cfg.oracle_horizon_ms = args["oracle-horizon-ms"].as<double>();
      cfg.scrape_interval_ms = args["scrape-ms"].as<double>();
      cfg.request_timeout_ms = args["timeout-s"].as<double>() * 1000.0;
      cfg.pipeline_override = pipeline_override;
      const std::string hp = args["hash-prompts"].as<std::string>();
      cfg.hash_prompts = hp == "always" ? HashPrompts::kAlways
                         : hp == "never" ? HashPrompts::kNever
                                         : HashPrompts::kAuto;
      try {
        RunResult r = run_cluster(sr.trace, cfg);
        auto sums = summarize(sr.trace, r);
        std::lock_guard lock(out_mu);
        std::cout << one_line(sr.scenario, r, sums.back()) << std::endl;
        sr.runs[job.strategy] = std::move(r);
        sr.summaries[job.strategy] = std::move(sums);
      } catch (const std::exception& e) {
        std::lock_guard lock(out_mu);
        std::cerr << sr.scenario.name << "/" << strategy_name(strategies[job.strategy])
                  << ": " << e.what() << std::endl;
        failed = true;
      }
    }
  };
  const int threads = std::max(1, args["threads"].as<int>());
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) {
    pool.emplace_back(worker);
  }
  for (auto& t : pool) {
    t.join();
  }
  if (failed) {
    return 1;
  }
  ReportInfo info;
  info.total_wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  info.threads = threads;
  info.seed = seed;
  for (int i = 0; i < argc; ++i) {
    if (i > 0) {
      info.command += ' ';
    }
    info.command += argv[i];
  }
  info.machine = machine_line();
  info.scrape_ms = args["scrape-ms"].as<double>();
  info.timeout_s = args["timeout-s"].as<double>();
  info.retrain_s = RunConfig{}.retrain_interval_ms / 1000.0;
  info.oracle_probes = args["oracle-probes"].as<int>();
  info.oracle_horizon_ms = args["oracle-horizon-ms"].as<double>();
  std::cout << "total wall time " << info.total_wall_s << " s\n";
  if (!args.count("no-report")) {
    const std::string dir = args["out-dir"].as<std::string>();
    write_outputs(dir, all, info);
    std::cout << "wrote " << dir << "/report.md\n";
  }
  return 0;
}
