// cluster_sim: the routing-quality benchmark in virtual time (shared/spec/simulator.md section 5).
// Runs every scenario under every strategy and seed on identical arrivals (per seed), in
// parallel over --threads (each run is single-threaded and deterministic), then writes CSVs and
// report.md to --out-dir.
// bench/cluster/run_report.sh builds, runs and renders the plots; see bench/cluster/README.md.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <fstream>
#include <iostream>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <cxxopts.hpp>
#include <spdlog/spdlog.h>
#include <yaml-cpp/yaml.h>

#include "bench/cluster/cluster_sim.h"
#include "bench/cluster/report.h"
#include "bench/cluster/report_metrics.h"
#include "bench/cluster/scenarios.h"
#include "bench/cluster/suite.h"
#include "epp/queue/queue_config.h"
#include "epp/scheduler/yaml_json.h"

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

std::optional<std::vector<uint64_t>> parse_seeds(const std::string& text) {
  std::vector<uint64_t> out;
  for (const auto& item : split(text, ',')) {
    try {
      std::size_t used = 0;
      out.push_back(std::stoull(item, &used));
      if (used != item.size()) return std::nullopt;
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  if (out.empty()) return std::nullopt;
  return out;
}

double thread_cpu_s() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// CPU seconds of the whole process (every thread, XGBoost's OpenMP helpers included).
double process_cpu_s() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  auto s = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec);
  };
  return s(ru.ru_utime) + s(ru.ru_stime);
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

// Calls `fn(i)` for i in [0, n) on `threads` threads, in index order; stops handing out work
// once `fn` returns false.
void parallel_for(std::size_t n, int threads, const std::function<bool(std::size_t)>& fn) {
  std::atomic<std::size_t> next{0};
  std::atomic<bool> stop{false};
  auto worker = [&] {
    for (std::size_t i = next++; i < n && !stop; i = next++) {
      if (!fn(i)) {
        stop = true;
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < std::max(1, threads); ++t) {
    pool.emplace_back(worker);
  }
  for (auto& t : pool) {
    t.join();
  }
}

// A bad command line: main prints it and exits 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// A run that failed (a probe or a simulation threw): main exits 1; the error is printed.
struct RunFailed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

cxxopts::Options make_options() {
  cxxopts::Options opts("cluster_sim", "Virtual-time routing benchmark over simulated vLLM pods");
  // clang-format off
  opts.add_options()
    ("out-dir", "Output directory", cxxopts::value<std::string>()->default_value("bench/results/routing"))
    ("scenarios", "Comma list of scenario names, or 'all'", cxxopts::value<std::string>()->default_value("all"))
    ("holdout", "Run the hold-out pool shapes instead of the default set")
    ("strategies", "Comma list (rr, lp111, lp322, pl_least, pl_upstream, pl_most, oracle, oracle_cost, oracle_slo), 'default' (all but pl_most, oracle_cost and oracle_slo; the suite adds oracle_cost) or 'all'", cxxopts::value<std::string>()->default_value("default"))
    ("threads", "Runs in parallel", cxxopts::value<int>()->default_value("2"))
    ("seeds", "Comma list of seeds (traces, engines and scheduling); one run per scenario, strategy and seed", cxxopts::value<std::string>()->default_value("1,2,3"))
    ("seed", "A single seed (replaces --seeds)", cxxopts::value<uint64_t>())
    ("quick", "Small pools and short stages (smoke test)")
    ("stage-seconds", "Virtual seconds per stage (0 = the set's default; scenarios with their own stage length keep it)", cxxopts::value<double>()->default_value("0"))
    ("scrape-real-ms", "EPP metrics scrape period in real ms, scaled by each scenario's time scale (0 = exact metrics per decision)", cxxopts::value<double>()->default_value("50"))
    ("retrain-real-s", "Trainer retraining interval in real s, scaled by each scenario's time scale", cxxopts::value<double>()->default_value("10"))
    ("epp-config-dir", "Directory of the EPP pipeline YAML files", cxxopts::value<std::string>()->default_value(LLMD_SOURCE_DIR "/epp/config"))
    ("oracle-probes", "Oracle: max pods probed per request (0 = all)", cxxopts::value<int>()->default_value("2"))
    ("oracle-horizon-ms", "Oracle: cap on one probe's simulated time (0 = none)", cxxopts::value<double>()->default_value("1000"))
    ("timeout-s", "Client timeout per request (virtual seconds)", cxxopts::value<double>()->default_value("60"))
    ("preset", "Custom scenario: workload preset (replaces --scenarios)", cxxopts::value<std::string>()->default_value(""))
    ("stages", "Custom scenario: rate:duration_s,...", cxxopts::value<std::string>()->default_value(""))
    ("pods", "Custom scenario: pool size", cxxopts::value<int>()->default_value("10"))
    ("slow-pods", "Custom scenario: pods on the slow profile", cxxopts::value<int>()->default_value("0"))
    ("length-scale", "Custom scenario: sequence length scale (KV capacity scales with it)", cxxopts::value<double>()->default_value("0.1"))
    ("time-scale", "Custom scenario: scale of the scrape and retrain clocks (0 = the length scale)", cxxopts::value<double>()->default_value("0"))
    ("saturation-rps", "Custom scenario: rate at which round-robin saturates the pool (splits the report into below-saturation and overload stages)", cxxopts::value<double>()->default_value("0"))
    ("unshared", "Custom scenario: single-turn requests without a system prompt (no shared prefix)")
    ("slo-ttft-ms", "Custom scenario: x-slo-ttft-ms", cxxopts::value<double>())
    ("slo-tpot-ms", "Custom scenario: x-slo-tpot-ms", cxxopts::value<double>())
    ("hash-prompts", "auto | always | never: give engines the prompts' block hashes", cxxopts::value<std::string>()->default_value("auto"))
    ("linear-base", "Ablation: trainer fits on a linear base (true/false; default: the trainer's)", cxxopts::value<std::string>()->default_value(""))
    ("objective", "Ablation: trainer objective quantile|mean (default: the trainer's)", cxxopts::value<std::string>()->default_value(""))
    ("pipeline-file", "Ablation: use this pipeline YAML instead of the strategies' own", cxxopts::value<std::string>()->default_value(""))
    ("router-queue", "A YAML file holding the EPP config's routerQueue section: every strategy runs behind that router queue", cxxopts::value<std::string>()->default_value(""))
    ("suite", "Generalization suite: N random scenarios (bench/cluster/suite.h) instead of a scenario set; writes suite.md and suite.csv", cxxopts::value<int>())
    ("suite-seed", "Generalization suite: the seed scenarios are drawn from", cxxopts::value<uint64_t>()->default_value("1"))
    ("suite-quick", "Generalization suite: 20 smaller scenarios (unless --suite N), no oracle unless --suite-oracle-pods")
    ("suite-oracle-pods", "Generalization suite: run the two oracles on pools up to this many pods (default: 12, 0 with --suite-quick)", cxxopts::value<int>())
    ("suite-only", "Generalization suite: run only these scenario indices (comma list)", cxxopts::value<std::string>()->default_value(""))
    ("suite-reseed", "Generalization suite: replace each scenario's trace seed by a new one (same shape, other arrivals); 0 = off", cxxopts::value<uint64_t>()->default_value("0"))
    ("suite-trace-seeds", "Generalization suite: trace seeds per scenario (the verdict is on their mean; the first is the scenario's own seed)", cxxopts::value<int>()->default_value("3"))
    ("suite-detail", "Generalization suite: also write the per-stage report (report.md, stages.csv) to <out-dir>/detail")
    ("epp-replicas", "Active-active EPP replicas over each pool (own pod table, in-flight view, prefix index, scrape phase)", cxxopts::value<int>()->default_value("1"))
    ("replica-split", "How the gateway splits arrivals between EPP replicas: rr | random", cxxopts::value<std::string>()->default_value("rr"))
    ("replica-training", "Predicted-latency with several replicas: shared (one trainer fed by all) | own (one per replica)", cxxopts::value<std::string>()->default_value("shared"))
    ("replica-sharing", "What EPP replicas exchange of their in-flight work per pod and learned prefix blocks: none | scrape (each at its scrape) | decision (before every decision: the bound)", cxxopts::value<std::string>()->default_value("none"))
    ("pod-outages", "Pods the EPP cannot reach for a while: POD:FROM-TO[,...] (pod index, virtual seconds), e.g. 0:10-20; scrapes fail, dispatches are retried on the next ranked pod, streams in progress break", cxxopts::value<std::string>()->default_value(""))
    ("no-report", "Print summaries only")
    ("h,help", "Help");
  // clang-format on
  return opts;
}

std::vector<uint64_t> read_seeds(const cxxopts::ParseResult& args) {
  if (args.count("seed")) {
    return {args["seed"].as<uint64_t>()};
  }
  if (auto parsed = parse_seeds(args["seeds"].as<std::string>())) {
    return *parsed;
  }
  throw UsageError("--seeds: expected a comma list of integers");
}

TimeBase read_time_base(const cxxopts::ParseResult& args) {
  TimeBase time;
  time.scrape_real_ms = args["scrape-real-ms"].as<double>();
  time.retrain_real_s = args["retrain-real-s"].as<double>();
  if (!(time.scrape_real_ms >= 0) || !(time.retrain_real_s > 0)) {
    throw UsageError("--scrape-real-ms must be >= 0 and --retrain-real-s > 0");
  }
  return time;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    throw UsageError("cannot read " + path);
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::optional<epp::RouterQueueConfig> read_router_queue(const std::string& path) {
  if (path.empty()) {
    return std::nullopt;
  }
  try {
    YAML::Node doc = YAML::LoadFile(path);
    auto parsed = epp::parse_router_queue_config(
        epp::yaml_to_json(doc["routerQueue"] ? doc["routerQueue"] : doc));
    if (auto* error = std::get_if<std::string>(&parsed)) {
      throw UsageError(path + ": " + *error);
    }
    return std::get<epp::RouterQueueConfig>(std::move(parsed));
  } catch (const YAML::Exception& e) {
    throw UsageError(path + ": " + e.what());
  }
}

// The settings every run shares, whatever its scenario and strategy: applied to each run's
// RunConfig after make_run_config.
struct SharedRunSettings {
  int oracle_max_probes = 0;
  double oracle_horizon_ms = 0;
  double request_timeout_ms = 0;
  std::string pipeline_override;
  std::optional<epp::RouterQueueConfig> router_queue;
  int epp_replicas = 1;
  RunConfig::ReplicaSplit replica_split = RunConfig::ReplicaSplit::kRoundRobin;
  bool shared_training = true;
  RunConfig::ReplicaSharing replica_sharing = RunConfig::ReplicaSharing::kNone;
  std::vector<RunConfig::PodOutage> outages;
  std::optional<bool> linear_base;
  std::optional<model::Objective> objective;
  HashPrompts hash_prompts = HashPrompts::kAuto;

  void apply(RunConfig& cfg) const {
    cfg.oracle_max_probes = oracle_max_probes;
    cfg.oracle_horizon_ms = oracle_horizon_ms;
    cfg.request_timeout_ms = request_timeout_ms;
    cfg.pipeline_override = pipeline_override;
    cfg.router_queue = router_queue;
    cfg.epp_replicas = epp_replicas;
    cfg.replica_split = replica_split;
    cfg.shared_training = shared_training;
    cfg.replica_sharing = replica_sharing;
    cfg.outages = outages;
    if (linear_base) {
      cfg.linear_base = linear_base;
    }
    if (objective) {
      cfg.objective = objective;
    }
    cfg.hash_prompts = hash_prompts;
  }
};

void read_replica_settings(const cxxopts::ParseResult& args, SharedRunSettings& s) {
  s.epp_replicas = args["epp-replicas"].as<int>();
  const std::string split_by = args["replica-split"].as<std::string>();
  const std::string training = args["replica-training"].as<std::string>();
  if (s.epp_replicas < 1 || s.epp_replicas > 64 || (split_by != "rr" && split_by != "random") ||
      (training != "shared" && training != "own")) {
    throw UsageError(
        "--epp-replicas must be in [1, 64], --replica-split rr or random, "
        "--replica-training shared or own");
  }
  s.replica_split = split_by == "random" ? RunConfig::ReplicaSplit::kRandom
                                         : RunConfig::ReplicaSplit::kRoundRobin;
  s.shared_training = training == "shared";
  const std::string sharing = args["replica-sharing"].as<std::string>();
  if (sharing != "none" && sharing != "scrape" && sharing != "decision") {
    throw UsageError("--replica-sharing must be none, scrape or decision");
  }
  s.replica_sharing = sharing == "scrape"     ? RunConfig::ReplicaSharing::kAtScrape
                      : sharing == "decision" ? RunConfig::ReplicaSharing::kEveryDecision
                                              : RunConfig::ReplicaSharing::kNone;
}

void read_ablation_settings(const cxxopts::ParseResult& args, SharedRunSettings& s) {
  if (const auto lb = args["linear-base"].as<std::string>(); !lb.empty()) {
    if (lb != "true" && lb != "false") {
      throw UsageError("--linear-base must be true or false, got '" + lb + "'");
    }
    s.linear_base = lb == "true";
  }
  if (const auto ob = args["objective"].as<std::string>(); !ob.empty()) {
    s.objective = model::parse_objective(ob);
    if (!s.objective) {
      throw UsageError("--objective must be quantile or mean, got '" + ob + "'");
    }
  }
  const std::string hp = args["hash-prompts"].as<std::string>();
  if (hp != "auto" && hp != "always" && hp != "never") {
    throw UsageError("--hash-prompts must be auto, always or never, got '" + hp + "'");
  }
  s.hash_prompts = hp == "always"  ? HashPrompts::kAlways
                   : hp == "never" ? HashPrompts::kNever
                                   : HashPrompts::kAuto;
  if (const std::string pf = args["pipeline-file"].as<std::string>(); !pf.empty()) {
    s.pipeline_override = read_file(pf);
  }
}

SharedRunSettings read_shared_settings(const cxxopts::ParseResult& args) {
  SharedRunSettings s;
  read_replica_settings(args, s);
  read_ablation_settings(args, s);
  try {
    s.outages = parse_pod_outages(args["pod-outages"].as<std::string>());
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("--pod-outages: ") + e.what());
  }
  s.oracle_max_probes = args["oracle-probes"].as<int>();
  s.oracle_horizon_ms = args["oracle-horizon-ms"].as<double>();
  s.request_timeout_ms = args["timeout-s"].as<double>() * 1000.0;
  s.router_queue = read_router_queue(args["router-queue"].as<std::string>());
  return s;
}

// The scenarios to run and, for the suite, what was drawn and what probing them cost.
struct ScenarioSet {
  std::string name;
  std::vector<Scenario> scenarios;
  bool suite = false;
  uint64_t suite_seed = 0;
  std::vector<SuiteEntry> suite_entries;
  int suite_oracle_max_pods = 0;
  double probe_wall_s = 0, probe_cpu_s = 0;
};

std::vector<SuiteEntry> draw_suite(const cxxopts::ParseResult& args, const SuiteOptions& so,
                                   uint64_t suite_seed) {
  const int n = args.count("suite") ? args["suite"].as<int>() : 20;
  std::vector<int> only;
  for (const auto& k : split(args["suite-only"].as<std::string>(), ',')) {
    try {
      only.push_back(std::stoi(k));
    } catch (const std::exception&) {
      throw UsageError("--suite-only: expected a comma list of indices, got '" + k + "'");
    }
  }
  const uint64_t reseed = args["suite-reseed"].as<uint64_t>();
  std::vector<SuiteEntry> entries;
  for (auto p : SuiteGenerator(so).generate(suite_seed, n)) {
    if (!only.empty() && std::find(only.begin(), only.end(), p.index) == only.end()) {
      continue;
    }
    if (reseed > 0) {
      p.seed += reseed * 1000003;
    }
    entries.push_back({p, {}});
  }
  return entries;
}

// Probes each drawn scenario's saturation with round-robin (in parallel).
void probe_suite(ScenarioSet& set, const SuiteOptions& so, int threads, const std::string& epp_dir,
                 const TimeBase& time) {
  std::mutex probe_mu;
  bool probe_failed = false;
  const auto t0 = std::chrono::steady_clock::now();
  const double cpu0 = process_cpu_s();
  parallel_for(set.suite_entries.size(), threads, [&](std::size_t i) {
    auto& e = set.suite_entries[i];
    try {
      e.probe = probe_saturation(e.params, so, [&](const Scenario& probe) {
        const auto trace = make_trace(probe);
        return summarize(trace, run_cluster(trace, make_run_config(probe, Strategy::kRoundRobin,
                                                                   epp_dir, time)));
      });
      std::lock_guard lock(probe_mu);
      std::cout << e.params.name() << " probe: saturation " << e.probe.saturation_rps << " req/s"
                << (e.probe.saturated ? "" : " (extrapolated)") << "; " << e.params.describe()
                << std::endl;
      return true;
    } catch (const std::exception& ex) {
      std::lock_guard lock(probe_mu);
      std::cerr << e.params.name() << " probe: " << ex.what() << std::endl;
      probe_failed = true;
      return false;
    }
  });
  if (probe_failed) {
    throw RunFailed("a saturation probe failed");
  }
  set.probe_wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  set.probe_cpu_s = process_cpu_s() - cpu0;
  std::cout << "probes: " << set.probe_wall_s << " s wall, " << set.probe_cpu_s << " s CPU"
            << std::endl;
}

// Draw, then probe each scenario's saturation with round-robin; the scenarios then run with
// each one's own seed.
ScenarioSet suite_set(const cxxopts::ParseResult& args, int threads, const std::string& epp_dir,
                      const TimeBase& time) {
  ScenarioSet set;
  set.name = "suite";
  set.suite = true;
  set.suite_seed = args["suite-seed"].as<uint64_t>();
  SuiteOptions so = args.count("suite-quick") ? SuiteOptions::quick() : SuiteOptions{};
  if (args.count("suite-oracle-pods")) {
    so.oracle_max_pods = args["suite-oracle-pods"].as<int>();
  }
  set.suite_oracle_max_pods = so.oracle_max_pods;
  set.suite_entries = draw_suite(args, so, set.suite_seed);
  probe_suite(set, so, threads, epp_dir, time);
  for (const auto& e : set.suite_entries) {
    set.scenarios.push_back(suite_scenario(e.params, e.probe, so));
  }
  return set;
}

ScenarioSet custom_set(const cxxopts::ParseResult& args) {
  Scenario s;
  s.name = "custom";
  s.preset = args["preset"].as<std::string>();
  s.title = "custom: preset " + s.preset;
  std::string err;
  auto st = workload::parse_stages(args["stages"].as<std::string>(), &err);
  if (!st) {
    throw UsageError("--stages: " + err);
  }
  s.stages = *st;
  s.pool.num_pods = args["pods"].as<int>();
  s.pool.num_slow = args["slow-pods"].as<int>();
  s.length_scale = args["length-scale"].as<double>();
  s.time_scale = args["time-scale"].as<double>();
  s.saturation_rps = args["saturation-rps"].as<double>();
  s.unshared = args.count("unshared") > 0;
  if (args.count("slo-ttft-ms")) s.slo_ttft_ms = args["slo-ttft-ms"].as<double>();
  if (args.count("slo-tpot-ms")) s.slo_tpot_ms = args["slo-tpot-ms"].as<double>();
  ScenarioSet set;
  set.name = "custom";
  set.scenarios.push_back(s);
  return set;
}

ScenarioSet named_set(const cxxopts::ParseResult& args) {
  SetOptions options;
  options.quick = args.count("quick") > 0;
  options.stage_seconds = args["stage-seconds"].as<double>();
  ScenarioSet set;
  set.name = args.count("holdout") ? "holdout" : "default";
  auto all = args.count("holdout") ? holdout_scenarios(options) : default_scenarios(options);
  const std::string want = args["scenarios"].as<std::string>();
  if (want == "all") {
    set.scenarios = all;
    return set;
  }
  for (const auto& name : split(want, ',')) {
    const auto before = set.scenarios.size();
    std::copy_if(all.begin(), all.end(), std::back_inserter(set.scenarios),
                 [&](const Scenario& s) { return s.name == name; });
    if (set.scenarios.size() == before) {
      throw UsageError("unknown scenario " + name + " in the " + set.name + " set");
    }
  }
  return set;
}

std::vector<Strategy> read_strategies(const cxxopts::ParseResult& args, bool suite,
                                      const std::string& epp_dir) {
  std::vector<Strategy> strategies;
  if (const std::string want = args["strategies"].as<std::string>(); want == "all") {
    strategies.assign(kAllStrategies.begin(), kAllStrategies.end());
  } else if (want == "default") {
    strategies.assign(kDefaultStrategies.begin(), kDefaultStrategies.end());
    if (suite) {  // the suite's gap is measured against the better of both oracles
      strategies.push_back(Strategy::kOracleCost);
    }
  } else {
    for (const auto& k : split(want, ',')) {
      auto s = parse_strategy(k);
      if (!s) {
        throw UsageError("unknown strategy " + k);
      }
      strategies.push_back(*s);
    }
  }
  // A missing pipeline file fails here, before minutes of other runs.
  for (Strategy s : strategies) {
    std::string err;
    if (!is_oracle(s) && !pipeline_yaml(s, epp_dir, &err)) {
      throw UsageError(err);
    }
  }
  return strategies;
}

// One entry per (scenario, seed), the seeds of a scenario next to each other. Suite scenarios
// run on their own seed and `trace_seeds` - 1 more (other arrivals, lengths, jitter and
// scheduling draws; the offset keeps clear of --suite-reseed's).
std::vector<ScenarioRuns> plan_entries(const ScenarioSet& set, const std::vector<uint64_t>& seeds,
                                       const std::vector<Strategy>& strategies) {
  constexpr uint64_t kTraceSeedStep = 100000007;
  std::vector<ScenarioRuns> all;
  for (const auto& sc : set.scenarios) {
    for (uint64_t seed : seeds) {
      ScenarioRuns sr;
      sr.scenario = sc;
      sr.scenario.seed = set.suite ? sc.seed + seed * kTraceSeedStep : seed;
      sr.trace = make_trace(sr.scenario);
      sr.runs.resize(strategies.size());
      sr.summaries.resize(strategies.size());
      sr.cold_share.resize(strategies.size(), 0);
      sr.cpu_s.resize(strategies.size(), 0);
      for (std::size_t k = 0; k < strategies.size(); ++k) sr.runs[k].strategy = strategies[k];
      all.push_back(std::move(sr));
    }
  }
  return all;
}

struct Job {
  std::size_t entry;
  std::size_t strategy;
  double cost;
};

// Every (entry, strategy) a scenario runs, the expensive ones first so the workers finish
// together: generated tokens dominate a run's cost; the oracle and the model loop multiply it.
std::vector<Job> plan_jobs(const std::vector<ScenarioRuns>& all,
                           const std::vector<Strategy>& strategies) {
  std::vector<Job> jobs;
  for (std::size_t i = 0; i < all.size(); ++i) {
    const auto& only = all[i].scenario.strategies;
    double tokens = 0;
    for (const auto& r : all[i].trace.requests) tokens += static_cast<double>(r.max_tokens);
    for (std::size_t k = 0; k < strategies.size(); ++k) {
      const Strategy s = strategies[k];
      if (only.empty() || std::find(only.begin(), only.end(), s) != only.end()) {
        jobs.push_back({i, k, tokens * (is_oracle(s) ? 3 : uses_predictions(s) ? 2 : 1)});
      }
    }
  }
  std::stable_sort(jobs.begin(), jobs.end(),
                   [](const Job& a, const Job& b) { return a.cost > b.cost; });
  return jobs;
}

// Runs every job on `threads` threads, storing each result in its entry. Single requests are
// kept only where the report plots them (the first seed, outside the suite).
void run_jobs(std::vector<ScenarioRuns>& all, const std::vector<Job>& jobs,
              const std::vector<Strategy>& strategies, const SharedRunSettings& shared,
              const std::string& epp_dir, const TimeBase& time, int threads, bool suite,
              uint64_t first_seed) {
  std::mutex out_mu;
  bool failed = false;
  parallel_for(jobs.size(), threads, [&](std::size_t j) {
    const Job job = jobs[j];
    auto& sr = all[job.entry];
    RunConfig cfg = make_run_config(sr.scenario, strategies[job.strategy], epp_dir, time);
    shared.apply(cfg);
    try {
      const double cpu0 = thread_cpu_s();
      RunResult r = run_cluster(sr.trace, cfg);
      const double cpu = thread_cpu_s() - cpu0;
      auto sums = summarize(sr.trace, r);
      const double cold = cold_share(r);
      const std::string line = one_line(sr.scenario, r, sums.back());
      if (suite || sr.scenario.seed != first_seed) {
        std::vector<RequestResult>().swap(r.requests);
      }
      std::lock_guard lock(out_mu);
      std::cout << line << std::endl;
      sr.runs[job.strategy] = std::move(r);
      sr.summaries[job.strategy] = std::move(sums);
      sr.cold_share[job.strategy] = cold;
      sr.cpu_s[job.strategy] = cpu;
      return true;
    } catch (const std::exception& e) {
      std::lock_guard lock(out_mu);
      std::cerr << sr.scenario.name << " seed " << sr.scenario.seed << "/"
                << strategy_name(strategies[job.strategy]) << ": " << e.what() << std::endl;
      failed = true;
      return false;
    }
  });
  if (failed) {
    throw RunFailed("a run failed");
  }
}

void write_reports(const cxxopts::ParseResult& args, const ScenarioSet& set,
                   const std::vector<ScenarioRuns>& all, ReportInfo info) {
  if (args.count("no-report")) {
    return;
  }
  const std::string dir = args["out-dir"].as<std::string>();
  if (!set.suite) {
    write_outputs(dir, all, info);
    std::cout << "wrote " << dir << "/report.md\n";
    return;
  }
  info.seeds = {set.suite_seed};
  info.total_wall_s += set.probe_wall_s;
  info.total_cpu_s += set.probe_cpu_s;
  write_suite(dir, set.suite_entries, all, info, set.suite_seed);
  std::cout << "wrote " << dir << "/suite.md\n";
  if (args.count("suite-detail")) {
    write_outputs(dir + "/detail", all, info);
    std::cout << "wrote " << dir << "/detail/report.md\n";
  }
}

int run(const cxxopts::ParseResult& args, int argc, char** argv) {
  std::vector<uint64_t> seeds = read_seeds(args);
  const TimeBase time = read_time_base(args);
  const SharedRunSettings shared = read_shared_settings(args);
  const std::string epp_dir = args["epp-config-dir"].as<std::string>();
  const int threads = std::max(1, args["threads"].as<int>());
  const bool suite = args.count("suite") > 0 || args.count("suite-quick") > 0;
  const std::vector<Strategy> strategies = read_strategies(args, suite, epp_dir);
  const ScenarioSet set = suite ? suite_set(args, threads, epp_dir, time)
                          : !args["preset"].as<std::string>().empty() ? custom_set(args)
                                                                      : named_set(args);
  if (suite) {  // trace seeds 0..n-1 on top of each scenario's own
    seeds.clear();
    for (int k = 0; k < std::max(1, args["suite-trace-seeds"].as<int>()); ++k) {
      seeds.push_back(static_cast<uint64_t>(k));
    }
  }
  std::vector<ScenarioRuns> all = plan_entries(set, seeds, strategies);
  const auto t0 = std::chrono::steady_clock::now();
  const double cpu_start = process_cpu_s();
  run_jobs(all, plan_jobs(all, strategies), strategies, shared, epp_dir, time, threads, suite,
           seeds.front());
  ReportInfo info;
  info.total_wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  info.total_cpu_s = process_cpu_s() - cpu_start;
  info.threads = threads;
  info.seeds = seeds;
  info.set_name = set.name;
  for (int i = 0; i < argc; ++i) {
    info.command += (i > 0 ? " " : "") + std::string(argv[i]);
  }
  info.machine = machine_line();
  info.time = time;
  info.timeout_s = args["timeout-s"].as<double>();
  info.oracle_probes = args["oracle-probes"].as<int>();
  info.oracle_horizon_ms = args["oracle-horizon-ms"].as<double>();
  info.suite_oracle_max_pods = set.suite_oracle_max_pods;
  std::cout << "total wall time " << info.total_wall_s << " s, CPU time " << info.total_cpu_s
            << " s\n";
  write_reports(args, set, all, std::move(info));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  reexec_with_malloc_tunables(argv);
  cxxopts::Options opts = make_options();
  try {
    const cxxopts::ParseResult args = opts.parse(argc, argv);
    if (args.count("help")) {
      std::cout << opts.help() << "\n";
      return 0;
    }
    spdlog::set_level(spdlog::level::warn);
    return run(args, argc, argv);
  } catch (const UsageError& e) {
    std::cerr << e.what() << "\n";
    return 2;
  } catch (const RunFailed&) {
    return 1;  // what failed was printed where it failed
  } catch (const cxxopts::exceptions::exception& e) {
    std::cerr << e.what() << "\n";
    return 2;
  }
}
