// Load generator for the predictor: 100-row /predict/bulk/strict requests over keep-alive
// connections on loopback, at fixed offered rates (open loop: latency counts from the scheduled
// send time, so a slow server cannot hide queueing) or at fixed concurrency (closed loop).
//
// By default it starts its own trainer and predictor (real binaries), trains a model from the
// synthetic law, syncs it, then walks the rate ladder and prints/writes a table with achieved
// QPS, avg/p50/p99/p99.9 latency, errors and the predictor's CPU and RSS.
//   predictor_load [--rates 1,10,100,1000,2500,5000] [--duration 5] [--rows 100]
//   predictor_load --url http://127.0.0.1:8001 --pid <predictor pid>   (existing server)
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/common/bench_results.h"
#include "bench/common/bench_stats.h"
#include "bench/common/train_synthetic.h"
#include "common/config/options.h"
#include "common/features/feature_json.h"
#include "common/http/client.h"
#include "common/testing/synthetic_law.h"
#include "common/util/files.h"
#include "common/util/time.h"
#include "tests/support/process.h"

using namespace llmd;
using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

struct ProcStat {
  double cpu_seconds = 0;
  double rss_mb = 0;
};

ProcStat read_proc(pid_t pid) {
  ProcStat s;
  if (pid <= 0) {
    return s;
  }
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string content((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  auto close = content.rfind(')');
  if (close != std::string::npos) {
    std::istringstream rest(content.substr(close + 2));
    std::string field;
    std::vector<std::string> fields;
    while (rest >> field) {
      fields.push_back(field);
    }
    if (fields.size() > 22) {
      const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
      s.cpu_seconds = (std::stod(fields[11]) + std::stod(fields[12])) / tick;
      s.rss_mb = std::stod(fields[21]) * static_cast<double>(sysconf(_SC_PAGESIZE)) / 1048576.0;
    }
  }
  return s;
}

struct StepResult {
  double offered = 0;  // 0 = closed loop
  int concurrency = 0;
  double achieved = 0;
  double avg_ms = 0, p50_ms = 0, p99_ms = 0, p999_ms = 0;
  uint64_t ok = 0, errors = 0;
  double server_cpu_pct = 0;
  double server_rss_mb = 0;
};

StepResult run_step(const http::Url& url, const std::string& body, double rate, int concurrency,
                    double duration_s, pid_t pid) {
  const bool open_loop = rate > 0;
  const int threads = open_loop ? std::clamp(static_cast<int>(rate / 400) + 2, 2, 16) : concurrency;
  const auto start = Clock::now() + std::chrono::milliseconds(50);
  const auto end = start + std::chrono::duration_cast<Clock::duration>(
                               std::chrono::duration<double>(duration_s));
  std::atomic<uint64_t> next{0};
  std::vector<std::vector<double>> lat(threads);
  std::vector<uint64_t> errors(threads, 0);
  ProcStat before = read_proc(pid);
  auto wall0 = Clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      http::HttpClient client(url.host, url.port, std::chrono::seconds(5));
      const std::string target = url.base_path + "/predict/bulk/strict";
      while (true) {
        Clock::time_point scheduled;
        if (open_loop) {
          uint64_t i = next.fetch_add(1);
          scheduled = start + std::chrono::duration_cast<Clock::duration>(
                                  std::chrono::duration<double>(static_cast<double>(i) / rate));
          if (scheduled >= end) {
            return;
          }
          std::this_thread::sleep_until(scheduled);
        } else {
          scheduled = Clock::now();
          if (scheduled >= end) {
            return;
          }
        }
        auto r = client.post(target, body);
        double ms = std::chrono::duration<double, std::milli>(Clock::now() - scheduled).count();
        if (r.status == 200) {
          lat[t].push_back(ms);
        } else {
          ++errors[t];
        }
      }
    });
  }
  for (auto& th : pool) {
    th.join();
  }
  double wall = std::chrono::duration<double>(Clock::now() - wall0).count();
  ProcStat after = read_proc(pid);
  std::vector<double> all;
  StepResult s;
  for (int t = 0; t < threads; ++t) {
    all.insert(all.end(), lat[t].begin(), lat[t].end());
    s.errors += errors[t];
  }
  s.offered = rate;
  s.concurrency = open_loop ? 0 : concurrency;
  s.ok = all.size();
  // Over the real span: when the server falls behind, the step runs past its nominal end.
  s.achieved = static_cast<double>(all.size()) / std::max(duration_s, wall - 0.05);
  double sum = 0;
  for (double v : all) {
    sum += v;
  }
  s.avg_ms = all.empty() ? 0 : sum / static_cast<double>(all.size());
  s.p50_ms = bench::percentile(all, 0.5);
  s.p99_ms = bench::percentile(all, 0.99);
  s.p999_ms = bench::percentile(all, 0.999);
  s.server_cpu_pct = 100.0 * (after.cpu_seconds - before.cpu_seconds) / wall;
  s.server_rss_mb = after.rss_mb;
  return s;
}

std::string make_body(int rows) {
  testing::SyntheticLaw law;
  std::mt19937_64 rng(7);
  Json requests = Json::array();
  for (int i = 0; i < rows; ++i) {
    requests.push_back(features::feature_input_to_json(law.draw_features(rng)));
  }
  return Json{{"requests", requests}}.dump();
}

}  // namespace

int main(int argc, char** argv) {
  try {
    config::Options o("predictor_load", "Load generator for the predictor's bulk endpoint");
    o.add("url", "", "", "Existing predictor (default: start trainer + predictor here)");
    o.add("pid", "", "0", "PID of an existing predictor, for CPU/RSS columns");
    o.add("rates", "", "1,10,100,1000,2500,5000", "Offered requests/s, comma separated");
    o.add("concurrency", "", "1,4,16", "Closed-loop concurrency levels (after the rates)");
    o.add("duration", "", "5", "Seconds per step");
    o.add("rows", "", "100", "Rows per bulk request");
    o.add("workers", "", "2", "Predictor worker threads when started here");
    o.add("out", "", "bench/results/predictor_load", "Result file prefix (.md and .json)");
    if (!o.parse(argc, argv)) {
      return 0;
    }
    std::unique_ptr<testing::TempDir> tdir, pdir;
    std::unique_ptr<testing::Process> trainer, predictor;
    std::string url_text = o.str("url");
    pid_t pid = static_cast<pid_t>(o.integer("pid", 0));
    if (url_text.empty()) {
      tdir = std::make_unique<testing::TempDir>();
      pdir = std::make_unique<testing::TempDir>();
      uint16_t tport = testing::free_port();
      trainer = std::make_unique<testing::Process>(
          testing::binary("trainer/trainer"),
          std::vector<std::string>{
              "--host", "127.0.0.1", "--port", std::to_string(tport), "--retraining-interval",
              "0.5", "--ttft-model-path", tdir->file("ttft.ubj"), "--tpot-model-path",
              tdir->file("tpot.ubj"), "--ttft-gated-model-path", tdir->file("ttft_gated.bin"),
              "--tpot-gated-model-path", tdir->file("tpot_gated.bin")});
      if (!trainer->wait_http_ok(tport)) {
        throw std::runtime_error("trainer did not start: " + trainer->log());
      }
      bench::train_synthetic(tport, 5000, std::chrono::seconds(60));
      uint16_t pport = testing::free_port();
      predictor = std::make_unique<testing::Process>(
          testing::binary("predictor/predictor"),
          std::vector<std::string>{
              "--host", "127.0.0.1", "--port", std::to_string(pport), "--training-server-url",
              "http://127.0.0.1:" + std::to_string(tport), "--workers", o.str("workers"),
              "--log-level", "warn", "--local-ttft-model-path", pdir->file("ttft.ubj"),
              "--local-tpot-model-path", pdir->file("tpot.ubj"), "--local-ttft-gated-model-path",
              pdir->file("ttft_gated.bin"), "--local-tpot-gated-model-path",
              pdir->file("tpot_gated.bin")});
      if (!predictor->wait_http_ok(pport, "/readyz")) {
        throw std::runtime_error("predictor not ready: " + predictor->log());
      }
      http::HttpClient pc("127.0.0.1", pport);
      pc.post("/reload", "");
      trainer->terminate();  // the trainer's CPU must not disturb the measurement
      url_text = "http://127.0.0.1:" + std::to_string(pport);
      pid = predictor->pid();
    }
    auto url = http::parse_url(url_text);
    if (!url) {
      throw std::invalid_argument("--url: expected http://host:port");
    }
    const std::string body = make_body(static_cast<int>(o.integer("rows", 1, 10000)));
    const double duration = o.number("duration", 0.5, 120);
    // Warm-up: connections, page faults, branch predictors.
    run_step(*url, body, 0, 2, 1.0, pid);
    std::vector<StepResult> results;
    for (double rate : bench::parse_number_list(o.str("rates"))) {
      results.push_back(run_step(*url, body, rate, 0, duration, pid));
    }
    for (double c : bench::parse_number_list(o.str("concurrency"))) {
      results.push_back(run_step(*url, body, 0, static_cast<int>(c), duration, pid));
    }
    unsigned cores = std::thread::hardware_concurrency();
    std::string md = fmt::format(
        "# Predictor load: {} rows per /predict/bulk/strict request\n\n"
        "{} on {} cores; predictor with {} workers; load generator on the same machine "
        "(it competes for the same cores). Latency counts from the scheduled send time "
        "(open loop) and includes client-side HTTP and JSON work. Steps of {} s. Made by `{}` "
        "(from the repository root; `bench/run_reports.sh predictor`).\n\n"
        "| offered QPS | concurrency | achieved QPS | avg ms | p50 ms | p99 ms | p99.9 ms | ok | "
        "errors | server CPU % | server RSS MB |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
        o.str("rows"), util::now_rfc3339(), cores, o.str("workers"), duration,
        bench::command_line(argc, argv));
    Json jr = Json::array();
    for (const auto& s : results) {
      md += fmt::format(
          "| {} | {} | {:.1f} | {:.3f} | {:.3f} | {:.3f} | {:.3f} | {} | {} | {:.0f} | {:.1f} |\n",
          s.offered > 0 ? fmt::format("{:.0f}", s.offered) : "closed",
          s.concurrency > 0 ? std::to_string(s.concurrency) : "-", s.achieved, s.avg_ms, s.p50_ms,
          s.p99_ms, s.p999_ms, s.ok, s.errors, s.server_cpu_pct, s.server_rss_mb);
      jr.push_back(Json{{"offered_qps", s.offered},
                        {"concurrency", s.concurrency},
                        {"achieved_qps", s.achieved},
                        {"avg_ms", s.avg_ms},
                        {"p50_ms", s.p50_ms},
                        {"p99_ms", s.p99_ms},
                        {"p999_ms", s.p999_ms},
                        {"ok", s.ok},
                        {"errors", s.errors},
                        {"server_cpu_percent", s.server_cpu_pct},
                        {"server_rss_mb", s.server_rss_mb}});
    }
    std::cout << md << std::endl;
    const std::string out = o.str("out");
    util::write_file_atomic(out + ".md", md);
    util::write_file_atomic(out + ".json",
                            Json{{"rows", o.integer("rows")}, {"steps", jr}}.dump(2));
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "predictor_load: " << e.what() << std::endl;
    return 1;
  }
}
