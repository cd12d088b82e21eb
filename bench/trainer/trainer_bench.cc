// Trainer benchmark: HTTP ingest through the real trainer binary, in-process ingest for
// reference, and fit time / peak RSS of TrainerService::train_once on synthetic samples.
// Writes a Markdown report and a JSON twin (default bench/results/ under the repo root).
//
//   trainer_bench [--quick] [--trainer-bin PATH] [--out-dir DIR]
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <malloc.h>
#include <unistd.h>

#include <prometheus/registry.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "bench/common/bench_results.h"
#include "bench/common/bench_stats.h"
#include "common/features/feature_json.h"
#include "common/http/client.h"
#include "common/testing/synthetic_law.h"
#include "common/util/time.h"
#include "tests/support/process.h"
#include "trainer/model_fitter.h"
#include "trainer/sample_store.h"
#include "trainer/trainer_service.h"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using llmd::features::TrainingEntry;
using llmd::trainer::Target;
using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct BenchOptions {
  bool quick = false;
  std::string trainer_bin = std::string(LLMD_BINARY_DIR) + "/trainer/trainer";
  std::string out_dir = std::string(LLMD_SOURCE_DIR) + "/bench/results";
};

// ---------------------------------------------------------------------------------------------
// Machine / process facts

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

double proc_status_mib(const std::string& field) {
  return llmd::testing::proc_status_mib("self", field);
}

// VmHWM is a process-lifetime maximum; writing 5 to clear_refs (Linux >= 4.0) resets it to the
// current RSS so each fit case reports its own peak rather than the largest case so far.
bool reset_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

// CPU time of everything on the machine vs. this process (and the trainer child): the machine
// is shared, and another process's compile can slow a 2-thread XGBoost fit by 10x (a stolen core
// stalls every OpenMP barrier). Each case reports the load it could not account for.
struct CpuSample {
  Clock::time_point wall;
  double busy_s = 0;  // all CPUs, everything but idle and iowait
  double ours_s = 0;  // this process + the optional child
};

CpuSample cpu_sample(pid_t child = -1) {
  CpuSample c;
  c.wall = Clock::now();
  c.busy_s = llmd::bench::machine_busy_cpu_seconds();
  c.ours_s = llmd::bench::process_cpu_seconds("/proc/self/stat");
  if (child > 0) {
    c.ours_s += llmd::bench::process_cpu_seconds("/proc/" + std::to_string(child) + "/stat");
  }
  return c;
}

// Average number of cores used by other processes between two samples.
double foreign_cores(const CpuSample& a, const CpuSample& b) {
  const double wall = std::chrono::duration<double>(b.wall - a.wall).count();
  if (wall <= 0) {
    return 0;
  }
  return std::max(0.0, ((b.busy_s - a.busy_s) - (b.ours_s - a.ours_s)) / wall);
}

// Waits (bounded by the shared `budget_s`) until other processes use < 0.25 cores, so a
// neighbour's build does not land inside a measurement. Returns the last observed load.
double wait_for_quiet(double& budget_s) {
  double load = 0;
  for (;;) {
    auto a = cpu_sample();
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    load = foreign_cores(a, cpu_sample());
    if (load < 0.25 || budget_s <= 0) {
      return load;
    }
    std::cerr << fmt::format(
        "  waiting: other processes use {:.2f} cores ({:.0f} s of wait "
        "budget left)\n",
        load, budget_s);
    std::this_thread::sleep_for(std::chrono::seconds(1));
    budget_s -= 1.5;
  }
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

// ---------------------------------------------------------------------------------------------
// Synthetic data

std::vector<TrainingEntry> make_entries(std::size_t n, uint64_t seed) {
  const llmd::testing::SyntheticLaw law;
  std::mt19937_64 rng(seed);
  std::vector<TrainingEntry> out(n);
  for (auto& e : out) {
    e.features = law.draw_features(rng);
    e.actual_ttft_ms = law.draw_ttft(e.features, rng);
    e.actual_tpot_ms = law.draw_tpot(e.features, rng);
    // The EPP reports what it predicted; sending it exercises the live-APE path too.
    e.predicted_ttft_ms = law.ttft_mean(e.features);
    e.predicted_tpot_ms = law.tpot_mean(e.features);
  }
  return out;
}

std::string bulk_body(const std::vector<TrainingEntry>& entries, std::size_t begin,
                      std::size_t count) {
  Json list = Json::array();
  const std::string ts = llmd::util::now_rfc3339();
  for (std::size_t i = 0; i < count; ++i) {
    const TrainingEntry& e = entries[(begin + i) % entries.size()];
    Json j = llmd::features::feature_input_to_json(e.features);
    j["actual_ttft_ms"] = e.actual_ttft_ms;
    j["actual_tpot_ms"] = e.actual_tpot_ms;
    j["predicted_ttft_ms"] = e.predicted_ttft_ms;
    j["predicted_tpot_ms"] = e.predicted_tpot_ms;
    j["timestamp"] = ts;
    list.push_back(std::move(j));
  }
  return Json{{"entries", std::move(list)}}.dump();
}

// ---------------------------------------------------------------------------------------------
// Temp dir and child process (RAII: the trainer never outlives the benchmark)

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "trainer-bench-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) {
      throw std::runtime_error("mkdtemp failed");
    }
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Free a moment ago on 127.0.0.1; the bind race is covered by the start retries below.
uint16_t free_loopback_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) {
    throw std::runtime_error("socket() failed");
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    throw std::runtime_error("cannot find a free loopback port");
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

class ChildProcess {
 public:
  ChildProcess(const std::string& exe, const std::vector<std::string>& args,
               const std::string& log_path) {
    std::vector<std::string> argv_store{exe};
    argv_store.insert(argv_store.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_store) {
      argv.push_back(a.data());
    }
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    // posix_spawn instead of fork: this process may already run XGBoost/HTTP threads.
    int rc = ::posix_spawn(&pid_, exe.c_str(), &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
      pid_ = -1;
      throw std::runtime_error(fmt::format("cannot start {}: {}", exe, std::strerror(rc)));
    }
  }
  ~ChildProcess() { stop(); }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  bool running() {
    if (pid_ <= 0) {
      return false;
    }
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return false;
    }
    return true;
  }

  // SIGTERM lets the trainer drain and write its final snapshot; SIGKILL only if it hangs.
  void stop() {
    if (pid_ <= 0) {
      return;
    }
    ::kill(pid_, SIGTERM);
    const auto deadline = Clock::now() + std::chrono::seconds(15);
    while (Clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;

 public:
  pid_t pid() const { return pid_; }
};

bool wait_healthy(ChildProcess& child, uint16_t port, std::chrono::seconds timeout) {
  llmd::http::HttpClient client("127.0.0.1", port, std::chrono::milliseconds(500));
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (!child.running()) {
      return false;
    }
    if (client.get("/healthz").status == 200) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// ---------------------------------------------------------------------------------------------
// Ingest

struct IngestResult {
  std::string transport;  // "http" | "in-process"
  std::size_t batch = 0;
  int threads = 0;
  double seconds = 0;
  std::size_t requests = 0;
  std::size_t samples = 0;
  std::size_t errors = 0;
  double p50_ms = 0;
  double p99_ms = 0;
  double foreign_cores = 0;  // other processes' CPU use during the case
  double samples_per_s() const { return seconds > 0 ? static_cast<double>(samples) / seconds : 0; }
  double requests_per_s() const {
    return seconds > 0 ? static_cast<double>(requests) / seconds : 0;
  }
};

// Nearest-rank percentile of sorted values.
double percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) {
    return 0;
  }
  std::size_t rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(sorted.size())));
  return sorted[std::clamp<std::size_t>(rank, 1, sorted.size()) - 1];
}

IngestResult http_ingest(uint16_t port, const std::vector<std::string>& bodies, std::size_t batch,
                         int threads, double duration_s) {
  struct PerThread {
    std::vector<double> latencies_ms;
    std::size_t errors = 0;
    std::string first_error;
  };
  std::vector<PerThread> per(static_cast<std::size_t>(threads));
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  Clock::time_point start;
  Clock::time_point deadline;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      PerThread& me = per[static_cast<std::size_t>(t)];
      llmd::http::HttpClient client("127.0.0.1", port, std::chrono::seconds(30));
      // Open the keep-alive connection before the clock starts: connect cost is not ingest.
      client.get("/healthz");
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) {
        std::this_thread::yield();
      }
      me.latencies_ms.reserve(1 << 16);
      std::size_t i = static_cast<std::size_t>(t);
      while (Clock::now() < deadline) {
        const std::string& body = bodies[i++ % bodies.size()];
        const auto t0 = Clock::now();
        auto r = client.post("/add_training_data_bulk", body);
        me.latencies_ms.push_back(seconds_since(t0) * 1000.0);
        if (r.status != 202) {
          if (me.errors++ == 0) {
            me.first_error =
                fmt::format("status {} {} {}", r.status, r.error, r.body.substr(0, 200));
          }
        }
      }
    });
  }
  while (ready.load() < threads) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  start = Clock::now();
  deadline = start +
             std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(duration_s));
  go.store(true, std::memory_order_release);
  for (auto& th : pool) {
    th.join();
  }
  IngestResult r;
  r.transport = "http";
  r.batch = batch;
  r.threads = threads;
  r.seconds = seconds_since(start);
  std::vector<double> all;
  for (auto& p : per) {
    all.insert(all.end(), p.latencies_ms.begin(), p.latencies_ms.end());
    r.errors += p.errors;
    if (!p.first_error.empty()) {
      std::cerr << "ingest error (batch " << batch << "): " << p.first_error << "\n";
    }
  }
  std::sort(all.begin(), all.end());
  r.requests = all.size() - r.errors;
  r.samples = r.requests * batch;
  r.p50_ms = percentile(all, 0.50);
  r.p99_ms = percentile(all, 0.99);
  return r;
}

std::vector<IngestResult> run_http_ingest(const BenchOptions& opt, Json& config_out,
                                          double& wait_budget_s) {
  if (!fs::exists(opt.trainer_bin)) {
    throw std::runtime_error("trainer binary not found: " + opt.trainer_bin +
                             " (build it or pass --trainer-bin)");
  }
  const double duration = opt.quick ? 1.0 : 3.0;
  const std::vector<std::size_t> batches = {1, 100, 1000};
  const std::vector<int> thread_counts = {1, 4};
  const auto entries = make_entries(20000, 7);
  // A few distinct bodies per size so the server does not parse one hot buffer forever.
  std::vector<std::vector<std::string>> bodies;
  for (std::size_t b : batches) {
    std::vector<std::string> v;
    for (std::size_t k = 0; k < 8; ++k) {
      v.push_back(bulk_body(entries, k * b, b));
    }
    bodies.push_back(std::move(v));
  }

  TempDir dir;
  std::vector<std::string> args;
  uint16_t port = 0;
  std::unique_ptr<ChildProcess> child;
  // The free port can be taken between probe and bind: retry with a fresh one.
  for (int attempt = 0; attempt < 3 && !child; ++attempt) {
    port = free_loopback_port();
    args = {"--host", "127.0.0.1", "--port", std::to_string(port),
            // No fitting and no periodic snapshots while ingest is measured.
            "--retraining-interval", "3600", "--snapshot-interval", "3600", "--ttft-model-path",
            dir.file("ttft.ubj"), "--tpot-model-path", dir.file("tpot.ubj"),
            "--ttft-gated-model-path", dir.file("ttft_gated.bin"), "--tpot-gated-model-path",
            dir.file("tpot_gated.bin"), "--samples-path", dir.file("training_samples.bin"),
            "--log-level", "warn"};
    auto c = std::make_unique<ChildProcess>(opt.trainer_bin, args, dir.file("trainer.log"));
    if (wait_healthy(*c, port, std::chrono::seconds(20))) {
      child = std::move(c);
    } else {
      std::cerr << "trainer did not become healthy:\n" << read_text(dir.file("trainer.log"));
    }
  }
  if (!child) {
    throw std::runtime_error("could not start the trainer binary");
  }
  config_out = Json{{"trainer_bin", opt.trainer_bin},
                    {"args", args},
                    {"duration_s_per_case", duration},
                    {"bodies_per_size", 8},
                    {"body_bytes", Json::object()}};
  for (std::size_t i = 0; i < batches.size(); ++i) {
    config_out["body_bytes"][std::to_string(batches[i])] = bodies[i][0].size();
  }

  std::vector<IngestResult> results;
  llmd::http::HttpClient control("127.0.0.1", port, std::chrono::seconds(30));
  for (std::size_t i = 0; i < batches.size(); ++i) {
    for (int threads : thread_counts) {
      // Same starting point for every case: an empty store (no FIFO eviction carried over).
      auto f = control.post("/flush", R"({"reason":"trainer_bench"})");
      if (f.status != 200) {
        throw std::runtime_error(fmt::format("/flush answered {}: {}", f.status, f.body));
      }
      wait_for_quiet(wait_budget_s);
      const auto cpu0 = cpu_sample(child->pid());
      auto r = http_ingest(port, bodies[i], batches[i], threads, duration);
      r.foreign_cores = foreign_cores(cpu0, cpu_sample(child->pid()));
      std::cerr << fmt::format(
          "  http ingest batch {:>4} x{} threads: {:>9.0f} samples/s, other load {:.2f}\n", r.batch,
          r.threads, r.samples_per_s(), r.foreign_cores);
      results.push_back(r);
    }
  }
  child->stop();
  return results;
}

std::vector<IngestResult> run_inprocess_ingest(const BenchOptions& opt, double& wait_budget_s) {
  const double duration = opt.quick ? 0.5 : 1.0;
  const auto entries = make_entries(20000, 11);
  std::vector<IngestResult> results;
  for (std::size_t batch : {std::size_t{1}, std::size_t{100}, std::size_t{1000}}) {
    TempDir dir;
    llmd::trainer::TrainerConfig cfg;
    cfg.ttft_model_path = dir.file("ttft.ubj");
    cfg.tpot_model_path = dir.file("tpot.ubj");
    cfg.ttft_gated_model_path = dir.file("ttft_gated.bin");
    cfg.tpot_gated_model_path = dir.file("tpot_gated.bin");
    prometheus::Registry registry;
    llmd::trainer::TrainerService service(cfg, registry);
    // Pre-built batches: only add_entries is timed, as the route hands it a ready vector.
    std::vector<std::vector<TrainingEntry>> batches;
    for (std::size_t b = 0; b * batch < entries.size(); ++b) {
      batches.emplace_back(entries.begin() + static_cast<std::ptrdiff_t>(b * batch),
                           entries.begin() + static_cast<std::ptrdiff_t>((b + 1) * batch));
    }
    std::vector<double> lat;
    wait_for_quiet(wait_budget_s);
    const auto cpu0 = cpu_sample();
    const auto start = Clock::now();
    const auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(duration));
    std::size_t k = 0;
    while (Clock::now() < deadline) {
      const auto t0 = Clock::now();
      service.add_entries(batches[k++ % batches.size()]);
      lat.push_back(seconds_since(t0) * 1000.0);
    }
    IngestResult r;
    r.transport = "in-process";
    r.batch = batch;
    r.threads = 1;
    r.seconds = seconds_since(start);
    r.foreign_cores = foreign_cores(cpu0, cpu_sample());
    r.requests = lat.size();
    r.samples = lat.size() * batch;
    std::sort(lat.begin(), lat.end());
    r.p50_ms = percentile(lat, 0.50);
    r.p99_ms = percentile(lat, 0.99);
    std::cerr << fmt::format(
        "  in-process add_entries batch {:>4}: {:>9.0f} samples/s, other load {:.2f}\n", batch,
        r.samples_per_s(), r.foreign_cores);
    results.push_back(r);
    // ~TrainerService writes a final snapshot into the temp dir; that is not timed.
  }
  return results;
}

// ---------------------------------------------------------------------------------------------
// Fit

struct FitCase {
  llmd::model::Objective objective;
  std::size_t samples;
  int threads;
};

struct FitResult {
  FitCase c;
  std::size_t entries_added = 0;
  std::array<std::size_t, 2> training{};
  std::array<std::size_t, 2> test{};
  std::size_t ttft_noqueue = 0;
  int repetitions = 1;
  double ttft_base_s = 0;   // median over repetitions
  double train_once_s = 0;  // median over repetitions
  std::vector<double> ttft_base_runs;
  std::vector<double> train_once_runs;
  bool ensemble = false;
  double coverage_ttft = 0;
  double mape_ttft = 0;
  double rss_before_mib = 0;
  double peak_rss_mib = 0;  // max over repetitions
  bool peak_is_per_case = false;
  double foreign_cores = 0;  // other processes' CPU use during the case
};

double median(std::vector<double> v) {
  if (v.empty()) {
    return 0;
  }
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

llmd::trainer::SampleStoreConfig fit_store_config() {
  llmd::trainer::SampleStoreConfig s;
  // SyntheticLaw's fullest bucket holds ~1.1% of the samples (~2.4k at 200k): 100k per bucket
  // means nothing is evicted, so the store holds exactly what was added.
  s.max_per_bucket = 100000;
  s.test_ratio = 0.1;
  s.max_test_per_target = 1000;
  return s;
}

llmd::model::TrainParams fit_params(int threads) {
  llmd::model::TrainParams p;  // defaults: 200 trees, depth 6, lr 0.05
  p.threads = threads;
  return p;
}

// The TrainerService holding `entries`, ready to train; model files go to `dir`.
std::unique_ptr<llmd::trainer::TrainerService> make_fit_service(const FitCase& c,
                                                                const TempDir& dir,
                                                                prometheus::Registry& registry) {
  llmd::trainer::TrainerConfig cfg;
  cfg.store = fit_store_config();
  cfg.objective = c.objective;
  cfg.quantile_alpha = 0.9;
  cfg.ensemble_mode = true;
  cfg.params = fit_params(c.threads);
  cfg.ttft_model_path = dir.file("ttft.ubj");
  cfg.tpot_model_path = dir.file("tpot.ubj");
  cfg.ttft_gated_model_path = dir.file("ttft_gated.bin");
  cfg.tpot_gated_model_path = dir.file("tpot_gated.bin");
  return std::make_unique<llmd::trainer::TrainerService>(cfg, registry);
}

FitResult run_fit_case(const FitCase& c) {
  FitResult r;
  r.c = c;
  // Small cases take well under a second and the machine is shared: the median of 3 runs is
  // far steadier than one. 200k runs once to stay inside the time budget.
  r.repetitions = c.samples <= 50000 ? 3 : 1;
  // Enough entries that ~90% (the training share) reaches the target; the loop below tops up.
  const uint64_t seed = 1000 + c.samples;
  auto entries = make_entries(c.samples + c.samples / 9 + 200, seed);

  // Same store config and insertion order as the service below, so the same rows in the same
  // order reach the TTFT base fit; fit_target_model is what train_once calls first.
  {
    llmd::trainer::SampleStore store(fit_store_config());
    std::size_t used = 0;
    while (store.training_count(Target::kTtft) < c.samples && used < entries.size()) {
      const auto& e = entries[used++];
      store.add(e.features, e.actual_ttft_ms, e.actual_tpot_ms);
    }
    r.entries_added = used;
    auto samples = store.training_samples(Target::kTtft);
    llmd::trainer::FitConfig fc;
    fc.objective = c.objective;
    fc.alpha = 0.9;
    fc.params = fit_params(c.threads);
    for (int rep = 0; rep < r.repetitions; ++rep) {
      const auto t0 = Clock::now();
      // train_once seeds with params.seed + store generation (= TTFT samples added so far).
      auto model =
          llmd::trainer::fit_target_model(fc, llmd::features::FeatureSet::kTtft, samples,
                                          fc.params.seed + store.generation(Target::kTtft));
      r.ttft_base_runs.push_back(seconds_since(t0));
      if (!model) {
        throw std::runtime_error("fit_target_model returned no model");
      }
    }
  }
  entries.resize(r.entries_added);
  r.ttft_base_s = median(r.ttft_base_runs);

  for (int rep = 0; rep < r.repetitions; ++rep) {
    // Hand freed heap back to the kernel first: otherwise earlier runs' retained arenas are
    // reused silently and the peak barely rises above "before".
    ::malloc_trim(0);
    const double before = proc_status_mib("VmRSS");
    r.peak_is_per_case = reset_peak_rss();
    TempDir dir;
    prometheus::Registry registry;
    auto service = make_fit_service(c, dir, registry);
    service->add_entries(entries);
    const auto t0 = Clock::now();
    const bool published = service->train_once();
    r.train_once_runs.push_back(seconds_since(t0));
    const double peak = proc_status_mib("VmHWM");
    if (!published) {
      throw std::runtime_error("train_once published nothing");
    }
    if (rep == 0 || peak > r.peak_rss_mib) {
      r.peak_rss_mib = peak;
      r.rss_before_mib = before;
    }
    if (rep == 0) {
      const auto status = service->data_status();
      r.training = status.training;
      r.test = status.test;
      r.ttft_noqueue = status.noqueue[0];
      r.ensemble = service->models()->ensemble_active();
      const auto evals = service->evaluations();
      if (!evals[0].empty()) {
        r.coverage_ttft = evals[0].back().coverage_percent;
        r.mape_ttft = evals[0].back().mape_percent;
      }
    }
  }
  r.train_once_s = median(r.train_once_runs);
  return r;
}

std::vector<FitResult> run_fits(const BenchOptions& opt, int hw, double& wait_budget_s) {
  using llmd::model::Objective;
  std::vector<FitCase> cases;
  const std::vector<std::size_t> sizes =
      opt.quick ? std::vector<std::size_t>{10000} : std::vector<std::size_t>{10000, 50000, 200000};
  for (Objective o : {Objective::kQuantile, Objective::kMean}) {
    for (std::size_t n : sizes) {
      cases.push_back({o, n, hw});
      if (n == 50000 && hw != 1) {
        cases.push_back({o, n, 1});
      }
    }
  }
  // Untimed warm-up: the first fit in a process pays for libxgboost's lazy initialisation and
  // first-touch page faults (slow in VMs), which would otherwise land on the first case.
  {
    const auto entries = make_entries(5000, 99);
    std::vector<llmd::trainer::Sample> samples;
    for (const auto& e : entries) {
      samples.push_back({e.features, static_cast<float>(e.actual_ttft_ms)});
    }
    llmd::trainer::FitConfig fc;
    fc.params = fit_params(hw);
    llmd::trainer::fit_target_model(fc, llmd::features::FeatureSet::kTtft, samples, 1);
  }
  std::vector<FitResult> out;
  for (const auto& c : cases) {
    wait_for_quiet(wait_budget_s);
    const auto cpu0 = cpu_sample();
    auto r = run_fit_case(c);
    r.foreign_cores = foreign_cores(cpu0, cpu_sample());
    std::cerr << fmt::format(
        "  fit {:<8} {:>6} samples {} thr: base {:.2f}s train_once {:.2f}s "
        "peak {:.0f} MiB, other load {:.2f}\n",
        llmd::model::objective_name(c.objective), c.samples, c.threads, r.ttft_base_s,
        r.train_once_s, r.peak_rss_mib, r.foreign_cores);
    out.push_back(r);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Report

std::string fmt_rate(double v) {
  // Thousands separators keep wide rates readable in the Markdown table.
  const std::string digits = fmt::format("{:.0f}", v);
  std::string s;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && digits[i - 1] != '-' && (digits.size() - i) % 3 == 0) {
      s += ',';
    }
    s += digits[i];
  }
  return s;
}

std::string markdown(const BenchOptions& opt, const Json& meta,
                     const std::vector<IngestResult>& http, const std::vector<IngestResult>& inproc,
                     const std::vector<FitResult>& fits, const Json& http_cfg) {
  std::string md;
  auto add = [&md](const std::string& s) { md += s + "\n"; };
  add("# Trainer benchmark");
  add("");
  add(fmt::format("- Date: {}", meta["date"].get<std::string>()));
  add(fmt::format("- Machine: {} CPUs (nproc), {}", meta["nproc"].get<int>(),
                  meta["cpu_model"].get<std::string>()));
  add(fmt::format("- Command: `{}` (from the repository root; `bench/run_reports.sh trainer`)",
                  meta.value("command", std::string("build/bench/trainer_bench"))));
  add(fmt::format("- Mode: {}{}", opt.quick ? "quick" : "full",
                  opt.quick ? " (10k fits only, 1 s ingest cases)" : ""));
  add(fmt::format("- Total runtime: {:.0f} s", meta["runtime_s"].get<double>()));
  add(fmt::format("- Load average at start / end: {} / {}",
                  meta["load_average_start"].get<std::string>(),
                  meta["load_average_end"].get<std::string>()));
  add("- *other load*: cores used by other processes during a case (/proc/stat busy time minus "
      "this benchmark and its trainer child). The machine is shared; the benchmark waits "
      "(bounded) for it to fall below 0.25 before each case. Values well above that mean the "
      "row is contaminated - with 2 fit threads on 2 cores a stolen core stalls every XGBoost "
      "barrier.");
  add("");
  add("## Ingest");
  add("");
  add(fmt::format(
      "HTTP: real `trainer` binary on 127.0.0.1 (`--retraining-interval 3600 "
      "--snapshot-interval 3600`, default store 500/bucket, 2 io threads), "
      "POST /add_training_data_bulk with pre-serialised bodies (SyntheticLaw entries incl. "
      "predicted_* and timestamp; {} / {} / {} bytes for 1 / 100 / 1000 entries), one keep-alive "
      "connection per client thread, {:.0f} s per case, store flushed before each case. Client and "
      "server share the same {} CPUs. In-process: `TrainerService::add_entries` on pre-built "
      "vectors, 1 thread, no JSON.",
      http_cfg["body_bytes"]["1"].get<std::size_t>(),
      http_cfg["body_bytes"]["100"].get<std::size_t>(),
      http_cfg["body_bytes"]["1000"].get<std::size_t>(),
      http_cfg["duration_s_per_case"].get<double>(), meta["nproc"].get<int>()));
  add("");
  add("| transport | entries/request | client threads | samples/s | requests/s | p50 ms | p99 ms "
      "| errors | other load |");
  add("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
  auto ingest_row = [&add](const IngestResult& r) {
    add(fmt::format("| {} | {} | {} | {} | {} | {:.4g} | {:.4g} | {} | {:.2f} |", r.transport,
                    r.batch, r.threads, fmt_rate(r.samples_per_s()), fmt_rate(r.requests_per_s()),
                    r.p50_ms, r.p99_ms, r.errors, r.foreign_cores));
  };
  for (const auto& r : http) {
    ingest_row(r);
  }
  for (const auto& r : inproc) {
    ingest_row(r);
  }
  add("");
  add("## Fit");
  add("");
  add("In-process. Samples drawn from `SyntheticLaw` (defaults: sigma 0.15, jitter 1 ms); store "
      "`max_per_bucket` 100000 (nothing evicted; the fullest of the 400 buckets holds ~1.1% of "
      "the samples), `test_ratio` 0.1, hold-out capped at 1000 per target. Default "
      "hyper-parameters (200 trees, depth 6, learning rate 0.05, subsample 0.8). Quantile = "
      "alpha 0.9, log-space location fit on 80% + calibration on 20%. Ensemble on "
      "(min 200 per split).");
  add("");
  add("- Times are the median of 3 runs for 10k and 50k, a single run for 200k (all runs in "
      "the JSON).");
  add("- *TTFT base fit*: `fit_target_model(kTtft)` alone on the same training rows.");
  add("- *train_once*: `TrainerService::train_once()` = TTFT and TPOT, each base + noqueue + "
      "queued ensemble fits, hold-out evaluation, serialisation and model file writes.");
  add("- *RSS before*: VmRSS after `malloc_trim(0)`, with the generated entries already in "
      "memory (process baseline incl. libxgboost).");
  add("- *peak RSS*: VmHWM of the benchmark process, reset via /proc/self/clear_refs right "
      "after *RSS before*; covers the TrainerService fill (add_entries) + train_once. "
      "*growth* = peak - before.");
  add("");
  add("| objective | samples/target | fit threads | TTFT base fit s | train_once s | ensemble "
      "| TTFT hold-out coverage % | TTFT MAPE % | RSS before MiB | peak RSS MiB | growth MiB "
      "| other load |");
  add("|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|");
  for (const auto& f : fits) {
    add(fmt::format(
        "| {} | {} | {} | {:.2f} | {:.2f} | {} | {:.1f} | {:.1f} | {:.0f} | {:.0f}{} | {:.0f} "
        "| {:.2f} |",
        llmd::model::objective_name(f.c.objective), fmt_rate(static_cast<double>(f.training[0])),
        f.c.threads, f.ttft_base_s, f.train_once_s, f.ensemble ? "on" : "off", f.coverage_ttft,
        f.mape_ttft, f.rss_before_mib, f.peak_rss_mib, f.peak_is_per_case ? "" : " (cumulative)",
        f.peak_rss_mib - f.rss_before_mib, f.foreign_cores));
  }
  return md;
}

Json ingest_json(const IngestResult& r) {
  return Json{{"transport", r.transport},
              {"entries_per_request", r.batch},
              {"client_threads", r.threads},
              {"seconds", r.seconds},
              {"requests", r.requests},
              {"samples", r.samples},
              {"errors", r.errors},
              {"samples_per_s", r.samples_per_s()},
              {"requests_per_s", r.requests_per_s()},
              {"p50_ms", r.p50_ms},
              {"p99_ms", r.p99_ms},
              {"other_load_cores", r.foreign_cores}};
}

Json fit_json(const FitResult& f) {
  return Json{{"objective", llmd::model::objective_name(f.c.objective)},
              {"requested_samples", f.c.samples},
              {"fit_threads", f.c.threads},
              {"entries_added", f.entries_added},
              {"training_samples", f.training},
              {"test_samples", f.test},
              {"ttft_noqueue_samples", f.ttft_noqueue},
              {"ttft_base_fit_s", f.ttft_base_s},
              {"train_once_s", f.train_once_s},
              {"repetitions", f.repetitions},
              {"ttft_base_fit_runs_s", f.ttft_base_runs},
              {"train_once_runs_s", f.train_once_runs},
              {"ensemble_active", f.ensemble},
              {"ttft_holdout_coverage_percent", f.coverage_ttft},
              {"ttft_holdout_mape_percent", f.mape_ttft},
              {"rss_before_mib", f.rss_before_mib},
              {"peak_rss_mib", f.peak_rss_mib},
              {"peak_rss_per_case", f.peak_is_per_case},
              {"other_load_cores", f.foreign_cores}};
}

void usage() {
  std::cout << "usage: trainer_bench [--quick] [--trainer-bin PATH] [--out-dir DIR]\n"
               "  --quick        10k-sample fits only and 1 s ingest cases (smoke run)\n"
               "  --trainer-bin  trainer executable (default " LLMD_BINARY_DIR
               "/trainer/trainer)\n"
               "  --out-dir      where trainer_bench.md/.json go (default " LLMD_SOURCE_DIR
               "/bench/results)\n";
}

int run(int argc, char** argv) {
  BenchOptions opt;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        throw std::invalid_argument(a + " needs a value");
      }
      return argv[++i];
    };
    if (a == "--quick") {
      opt.quick = true;
    } else if (a == "--trainer-bin") {
      opt.trainer_bin = value();
    } else if (a == "--out-dir") {
      opt.out_dir = value();
    } else if (a == "-h" || a == "--help") {
      usage();
      return 0;
    } else {
      usage();
      throw std::invalid_argument("unknown argument " + a);
    }
  }
  // train_once logs every fit at info; the benchmark prints its own progress.
  spdlog::set_level(spdlog::level::warn);
  // A dying trainer child must not kill the benchmark with SIGPIPE mid-request.
  ::signal(SIGPIPE, SIG_IGN);

  const auto started = Clock::now();
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  Json meta{{"date", utc_now()},
            {"command", llmd::bench::command_line(argc, argv)},
            {"nproc", hw},
            {"cpu_model", llmd::bench::cpu_model()},
            {"mode", opt.quick ? "quick" : "full"}};

  std::cerr << "HTTP ingest via " << opt.trainer_bin << "\n";
  Json http_cfg;
  // Shared bound on how long the run may wait for other processes to go quiet.
  double wait_budget_s = opt.quick ? 10 : 30;
  meta["load_average_start"] = load_average();
  auto http = run_http_ingest(opt, http_cfg, wait_budget_s);
  std::cerr << "in-process ingest\n";
  auto inproc = run_inprocess_ingest(opt, wait_budget_s);
  std::cerr << "fits\n";
  auto fits = run_fits(opt, hw, wait_budget_s);
  meta["load_average_end"] = load_average();
  meta["runtime_s"] = seconds_since(started);

  const std::string md = markdown(opt, meta, http, inproc, fits, http_cfg);
  Json out = meta;
  out["ingest_http_config"] = http_cfg;
  out["ingest_http"] = Json::array();
  for (const auto& r : http) {
    out["ingest_http"].push_back(ingest_json(r));
  }
  out["ingest_inprocess"] = Json::array();
  for (const auto& r : inproc) {
    out["ingest_inprocess"].push_back(ingest_json(r));
  }
  out["fit_config"] = Json{{"max_per_bucket", fit_store_config().max_per_bucket},
                           {"test_ratio", fit_store_config().test_ratio},
                           {"max_test_per_target", fit_store_config().max_test_per_target},
                           {"num_trees", 200},
                           {"max_depth", 6},
                           {"quantile_alpha", 0.9},
                           {"ensemble_mode", true}};
  out["fit"] = Json::array();
  for (const auto& f : fits) {
    out["fit"].push_back(fit_json(f));
  }

  std::cout << md;
  fs::create_directories(opt.out_dir);
  const std::string md_path = opt.out_dir + "/trainer_bench.md";
  const std::string json_path = opt.out_dir + "/trainer_bench.json";
  std::ofstream(md_path) << md;
  std::ofstream(json_path) << out.dump(2) << "\n";
  std::cerr << "wrote " << md_path << " and " << json_path << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "trainer_bench: " << e.what() << std::endl;
    return 1;
  } catch (...) {
    std::cerr << "trainer_bench: unknown error" << std::endl;
    return 1;
  }
}
