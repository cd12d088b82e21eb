// The EPP's own added latency, in both ingress modes, with a prediction for every candidate:
// - proxy: client send -> the picked pod receives the forwarded request (parse + schedule incl.
//   the coalesced prediction round trip + forward). Fake pods answer instantly.
// - ext_proc: the load generator plays Envoy on the EPP's gRPC port; request headers + body
//   written -> the answer carrying the picked endpoint arrives (no upstream in this path).
// Fixed offered rates per pool size, then per mode a capacity search: the highest rate whose
// p99 stays within --capacity-p99-ms, with the CPU each process spent per request (the load
// generator shares the 2 cores, so its CPU is reported too). Load is open loop (bench/
// epp_overhead/epp_overhead_load.h). Starts a real trainer (synthetic samples), predictors and the
// EPP
// (--in-process: no predictor; the EPP predicts from the trainer's model files itself).
//   epp_overhead [--quick] [--label name] [--modes proxy,ext_proc] [--rates ..] [--pods ..]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/common/bench_results.h"
#include "bench/common/bench_stats.h"
#include "bench/epp_overhead/epp_overhead_extproc.h"
#include "bench/epp_overhead/epp_overhead_load.h"
#include "bench/epp_overhead/epp_overhead_pods.h"
#include "bench/epp_overhead/epp_overhead_report.h"
#include "bench/epp_overhead/tcp_byte_meter.h"
#include "bench/common/train_synthetic.h"
#include "common/config/options.h"
#include "common/http/async_client.h"
#include "common/http/client.h"
#include "common/util/files.h"
#include "common/util/time.h"
#include "tests/support/process.h"

using namespace llmd;
using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

int thread_count(pid_t pid) {
  std::error_code ec;
  int n = 0;
  for (std::filesystem::directory_iterator it("/proc/" + std::to_string(pid) + "/task", ec), end;
       !ec && it != end; it.increment(ec)) {
    ++n;
  }
  return n;
}

double metric(const std::string& text, const std::string& name) {
  double total = 0;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name, 0) == 0 && (line[name.size()] == ' ' || line[name.size()] == '{')) {
      total += std::stod(line.substr(line.rfind(' ') + 1));
    }
  }
  return total;
}

// Observations of histogram `name` above `bound_s` (summed over its label sets): its _count
// minus its cumulative bucket whose le equals the bound.
double above(const std::string& text, const std::string& name, double bound_s) {
  const std::string bucket = name + "_bucket{";
  double at_bound = 0;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(bucket, 0) != 0) {
      continue;
    }
    const auto le = line.find("le=\"");
    if (le == std::string::npos) {
      continue;
    }
    const auto end = line.find('"', le + 4);
    const std::string v = line.substr(le + 4, end - le - 4);
    if (v != "+Inf" && std::fabs(std::stod(v) - bound_s) <= 1e-9) {
      at_bound += std::stod(line.substr(line.rfind(' ') + 1));
    }
  }
  return metric(text, name + "_count") - at_bound;
}

// A prompt that starts with the request's id (the fake pods key arrivals by it).
std::string completion_body(const std::string& id) {
  return fmt::format(R"({{"model":"m","prompt":"{} of a short benchmark prompt","max_tokens":1}})",
                     id);
}

// One EPP (one mode, one pool) under load: runs steps and measures what they cost.
struct Target {
  std::string mode;
  int pods = 0;
  testing::Process* epp = nullptr;
  std::vector<pid_t> predictors;
  std::vector<uint16_t> predictor_ports;
  http::HttpClient* metrics = nullptr;
  bench::LoadStart start;
  bench::Arrivals* arrivals = nullptr;
  double idle_cores = 0;  // the EPP's CPU with no requests (scraping, tickers), for the split

  Json measure(double rate, const bench::StepPlan& base) {
    bench::StepPlan plan = base;
    plan.rate = rate;
    const std::string before = metrics->get("/metrics").body;
    const int idle_threads = thread_count(epp->pid());
    std::atomic<int> peak_threads{idle_threads};
    std::atomic<bool> step_done{false};
    bench::TcpByteMeter bytes(predictor_ports);
    bytes.sample();
    std::thread sampler([&] {
      for (int i = 1; !step_done.load(); ++i) {
        peak_threads.store(std::max(peak_threads.load(), thread_count(epp->pid())));
        if (i % 5 == 0) {
          bytes.sample();  // the sampler's only until it is joined
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    });
    const auto cpu0 = bench::CpuSample::take(epp->pid(), predictors, bench::kPodThreadName);
    const auto t0 = Clock::now();
    bench::StepResult r = bench::run_step(plan, start);
    const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
    const auto cpu = bench::CpuSample::take(epp->pid(), predictors, bench::kPodThreadName) - cpu0;
    step_done.store(true);
    sampler.join();
    bytes.sample();
    const std::string after = metrics->get("/metrics").body;
    auto delta = [&](const std::string& n) { return metric(after, n) - metric(before, n); };
    const double batches = delta("llmd_epp_predictor_batch_rows_count");
    const double rows = delta("llmd_epp_predictor_batch_rows_sum");
    const double used = delta("llmd_epp_scheduling_predictions_total");
    const double used_true = delta("llmd_epp_scheduling_predictions_total{used=\"true\"}");
    const double sent = static_cast<double>(std::max<uint64_t>(1, r.sent));
    // Where the tail is spent: the share of requests over 2 and 5 ms end to end (the client's
    // view) against the share whose EPP-internal phases took that long (arrival at the EPP ->
    // dispatch to the pod; the scheduling cycle; one predictor round trip, per batch). What
    // the client sees and no phase shows happened before the EPP read the request or after it
    // dispatched it (the forward and the pod's accept).
    auto share_over = [&](double ms) {
      const auto n =
          std::count_if(r.latency_ms.begin(), r.latency_ms.end(), [&](double x) { return x > ms; });
      return r.latency_ms.empty()
                 ? 0.0
                 : 100.0 * static_cast<double>(n) / static_cast<double>(r.latency_ms.size());
    };
    auto phase_over = [&](const std::string& name, double s) {
      const double n = delta(name + "_count");
      return n > 0 ? 100.0 * (above(after, name, s) - above(before, name, s)) / n : 0.0;
    };
    Json tail;
    for (const auto& c : bench::kTailColumns) {
      tail[c.key] =
          *c.metric == '\0' ? share_over(c.bound_ms) : phase_over(c.metric, c.bound_ms / 1000.0);
    }
    auto per_req = [&](double s) { return 1e6 * s / sent; };
    Json row{{"mode", mode},
             {"pods", pods},
             {"offered_rps", rate},
             {"achieved_rps", r.achieved_rps()},
             {"p50_ms", bench::percentile(r.latency_ms, 0.5)},
             {"p90_ms", bench::percentile(r.latency_ms, 0.9)},
             {"p99_ms", bench::percentile(r.latency_ms, 0.99)},
             {"errors", r.errors},
             {"shed", r.shed},
             {"unfinished", r.unfinished},
             {"client_late_p99_ms", r.late_p99_ms},
             {"tail", tail},
             {"rows_per_batch", batches > 0 ? rows / batches : 0},
             {"callers_per_batch",
              batches > 0 ? delta("llmd_epp_predictor_batch_callers_sum") / batches : 0},
             {"predictions_used_pct", used > 0 ? 100.0 * used_true / used : 0},
             {"epp_idle_cores", idle_cores},
             {"epp_threads_idle", idle_threads},
             {"epp_threads_peak", peak_threads.load()},
             {"cpu_us_per_request",
              {{"epp", per_req(cpu.epp)},
               {"predictors", per_req(cpu.predictors)},
               {"pods", per_req(cpu.pods)},
               {"client", per_req(cpu.client)}}},
             {"predictor_bytes_per_request",
              {{"in", bytes.received() / sent}, {"out", bytes.sent() / sent}}},
             {"predictor_bytes_per_100_rows",
              {{"in", rows > 0 ? 100 * bytes.received() / rows : 0},
               {"out", rows > 0 ? 100 * bytes.sent() / rows : 0}}},
             {"cpu_cores",
              {{"epp", cpu.epp / wall},
               {"predictors", cpu.predictors / wall},
               {"pods", cpu.pods / wall},
               {"client", cpu.client / wall},
               {"machine", cpu.machine / wall}}}};
    std::cerr << fmt::format(
        "{} pods {} rate {} achieved {:.0f} p99 {:.3f} ms errors {} shed {}; CPU us/req EPP {:.0f} "
        "predictors {:.0f}; predictor bytes/req in {:.0f} out {:.0f} (per 100 rows {:.0f} / "
        "{:.0f}); predictions used {:.0f}%\n",
        mode, pods, rate, r.achieved_rps(), row["p99_ms"].get<double>(), r.errors, r.shed,
        per_req(cpu.epp), per_req(cpu.predictors), bytes.received() / sent, bytes.sent() / sent,
        rows > 0 ? 100 * bytes.received() / rows : 0, rows > 0 ? 100 * bytes.sent() / rows : 0,
        used > 0 ? 100.0 * used_true / used : 0);
    std::cerr << "  tail:" << bench::tail_cells(tail, false) << "\n";
    arrivals->clear();
    // Stragglers and the feedback flush; after an overloaded step the EPP may still be working
    // off requests the client gave up on, which would land on the next step.
    const bool overloaded = r.errors + r.unfinished + r.shed > 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(overloaded ? 2000 : 300));
    return row;
  }
};

// Why a capacity step failed ("" = it passed).
std::string verdict(const Json& s, double p99_limit) {
  std::string out;
  auto fail_if = [&out](bool failed, const std::string& why) {
    if (failed) {
      out += (out.empty() ? "" : ", ") + why;
    }
  };
  fail_if(s["p99_ms"].get<double>() > p99_limit, fmt::format("p99 > {} ms", p99_limit));
  fail_if(s["errors"].get<uint64_t>() + s["unfinished"].get<uint64_t>() > 0, "errors");
  fail_if(s["shed"].get<uint64_t>() > 0, "in-flight cap");
  fail_if(s["achieved_rps"].get<double>() < 0.95 * s["offered_rps"].get<double>(),
          "rate not reached");
  fail_if(s["client_late_p99_ms"].get<double>() > p99_limit, "client behind schedule");
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    config::Options o("epp_overhead", "Added latency and capacity of the EPP (proxy and ext_proc)");
    o.add_flag("quick", "", false, "Short steps, 100 pods only, one fixed rate (a smoke run)");
    o.add("modes", "", "proxy,ext_proc", "Ingress modes to measure");
    o.add("rates", "", "100,500,1000", "Fixed offered requests/s");
    o.add("pods", "", "10,100", "Pool sizes for the fixed rates");
    o.add("duration", "", "5", "Seconds per fixed-rate step");
    o.add("capacity-pods", "", "100", "Pool size of the capacity search (0: no search)");
    o.add("capacity-p99-ms", "", "5", "A capacity step passes when its p99 stays within this");
    o.add("capacity-from", "", "1000", "First rate of the search (doubled while steps pass)");
    o.add("capacity-max", "", "32000", "Highest rate tried");
    o.add("capacity-bisections", "", "3", "Bisection steps after the first failure");
    o.add("capacity-duration", "", "5", "Seconds per capacity step");
    o.add("ext-proc-channels", "", "2", "gRPC connections to the ext_proc port");
    o.add("predictors", "", "2", "Predictor replicas");
    o.add("in-process", "", "false",
          "The EPP predicts in process (--in-process-predictions, the trainer's model files as its "
          "local copies) and no predictor runs");
    o.add("pod-threads", "", "1", "io threads serving all the fake pods (one listener per pod)");
    o.add("label", "", "", "Run label in the results (e.g. quiet-host, noisy-validation)");
    o.add("binaries", "", "",
          "Directory holding epp/epp, predictor/predictor and trainer/trainer "
          "(default: this build's), e.g. a copy of another build's for an A/B run");
    o.add("out", "", "bench/results/epp_overhead", "Result file prefix (.md, .json)");
    if (!o.parse(argc, argv)) {
      return 0;
    }
    const bool quick = o.boolean("quick");
    const auto modes = o.str("modes");
    const auto rates = quick ? std::vector<double>{1000} : bench::parse_number_list(o.str("rates"));
    const auto pool_sizes =
        quick ? std::vector<double>{100} : bench::parse_number_list(o.str("pods"));
    const double duration = quick ? 2 : o.number("duration", 0.5, 120);
    const int capacity_pods = static_cast<int>(o.integer("capacity-pods", 0, 1000));
    const double p99_limit = o.number("capacity-p99-ms", 0.1, 1000);
    const double capacity_duration = quick ? 1.5 : o.number("capacity-duration", 0.5, 60);
    const int bisections = quick ? 1 : static_cast<int>(o.integer("capacity-bisections", 0, 10));
    const std::string binaries = o.str("binaries");
    const int pod_threads = static_cast<int>(o.integer("pod-threads", 1, 256));
    auto binary = [&](const std::string& relative) {
      return binaries.empty() ? testing::binary(relative) : binaries + "/" + relative;
    };

    testing::TempDir dir;
    uint16_t tport = testing::free_port();
    testing::Process trainer(
        binary("trainer/trainer"),
        {"--host", "127.0.0.1", "--port", std::to_string(tport), "--retraining-interval", "0.5",
         "--ttft-model-path", dir.file("t/ttft.ubj"), "--tpot-model-path", dir.file("t/tpot.ubj"),
         "--ttft-gated-model-path", dir.file("t/ttft_gated.bin"), "--tpot-gated-model-path",
         dir.file("t/tpot_gated.bin"), "--log-level", "warn"});
    if (!trainer.wait_http_ok(tport)) {
      throw std::runtime_error("trainer did not start");
    }
    bench::train_synthetic(tport, 5000, std::chrono::seconds(60));
    std::vector<std::unique_ptr<testing::Process>> predictors;
    std::vector<pid_t> predictor_pids;
    std::vector<uint16_t> predictor_ports;
    std::string urls;
    const bool in_process = o.boolean("in-process");
    for (int i = 0; i < (in_process ? 0 : o.integer("predictors", 0, 8)); ++i) {
      uint16_t p = testing::free_port();
      std::string d = dir.file("p" + std::to_string(i));
      predictors.push_back(std::make_unique<testing::Process>(
          binary("predictor/predictor"),
          std::vector<std::string>{
              "--host", "127.0.0.1", "--port", std::to_string(p), "--workers", "1",
              "--training-server-url", "http://127.0.0.1:" + std::to_string(tport), "--log-level",
              "warn", "--local-ttft-model-path", d + "/ttft.ubj", "--local-tpot-model-path",
              d + "/tpot.ubj", "--local-ttft-gated-model-path", d + "/ttft_gated.bin",
              "--local-tpot-gated-model-path", d + "/tpot_gated.bin"}));
      if (!predictors.back()->wait_http_ok(p, "/readyz")) {
        throw std::runtime_error("predictor not ready");
      }
      predictor_pids.push_back(predictors.back()->pid());
      predictor_ports.push_back(p);
      urls += (urls.empty() ? "" : ",") + std::string("http://127.0.0.1:") + std::to_string(p);
    }
    trainer.terminate();  // its CPU must not disturb the measurement

    std::vector<double> all_pods = pool_sizes;
    if (capacity_pods > 0 &&
        std::find(all_pods.begin(), all_pods.end(), capacity_pods) == all_pods.end()) {
      all_pods.push_back(capacity_pods);
    }
    bench::Arrivals arrivals;
    Json steps = Json::array(), capacity = Json::array(), search = Json::array();
    uint64_t step_no = 0;
    for (double pods_d : all_pods) {
      const int pods = static_cast<int>(pods_d);
      bench::FakePods fake(pods, arrivals, pod_threads);
      std::ofstream pool(dir.file("pool.yaml"));
      pool << "pool:\n  pods:\n";
      for (int i = 0; i < pods; ++i) {
        pool << "  - {name: pod-" << i
             << ", address: 127.0.0.1:" << fake.ports()[static_cast<std::size_t>(i)] << "}\n";
      }
      pool << "scrapeIntervalMs: 50\nstalenessMs: 2000\npipeline: " << LLMD_SOURCE_DIR
           << "/epp/config/default-pipeline.yaml\n";
      pool.close();
      for (const std::string mode : {"proxy", "ext_proc"}) {
        if (modes.find(mode) == std::string::npos) {
          continue;
        }
        // One EPP per mode: the ext_proc server's threads stay out of the proxy's numbers.
        uint16_t eport = testing::free_port(), hport = testing::free_port(),
                 mport = testing::free_port();
        std::vector<std::string> args{
            "--config",       dir.file("pool.yaml"), "--host",        "127.0.0.1",
            "--port",         std::to_string(eport), "--health-port", std::to_string(hport),
            "--metrics-port", std::to_string(mport), "--log-level",   "warn"};
        if (in_process) {
          // The trainer is gone: the EPP starts from the files it wrote, and syncs no more.
          args.insert(args.end(), {"--in-process-predictions", "true", "--training-server-url",
                                   "http://127.0.0.1:" + std::to_string(tport), "--local-model-dir",
                                   dir.file("t"), "--model-sync-interval", "86400"});
        } else {
          args.insert(args.end(), {"--prediction-server-url", urls});
        }
        uint16_t xport = 0;
        if (mode == "ext_proc") {
          xport = testing::free_port();
          args.insert(args.end(), {"--ext-proc-port", std::to_string(xport)});
        }
        testing::Process epp(binary("epp/epp"), args);
        if (!epp.wait_http_ok(hport, "/readyz")) {
          throw std::runtime_error("epp not ready: " + epp.log());
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(500));  // every pod scraped
        http::HttpClient mc("127.0.0.1", mport);
        // Both transports live until the EPP goes: callbacks of a step's stragglers may still run.
        std::unique_ptr<http::AsyncHttpClient> proxy_client;
        std::unique_ptr<bench::ExtProcLoad> ext_proc;
        Target t{mode, pods, &epp, predictor_pids, predictor_ports, &mc, {}, &arrivals};
        {
          const auto c0 = bench::CpuSample::take(epp.pid(), {}, bench::kPodThreadName);
          std::this_thread::sleep_for(std::chrono::seconds(1));
          t.idle_cores = (bench::CpuSample::take(epp.pid(), {}, bench::kPodThreadName) - c0).epp;
        }
        if (mode == "proxy") {
          http::AsyncHttpClient::Options co;
          co.max_idle_per_target = 1024;  // no reconnect churn at the EPP at high rates
          proxy_client = std::make_unique<http::AsyncHttpClient>(
              std::vector<http::Url>{{"127.0.0.1", eport, ""}}, co);
          t.start = [&, c = proxy_client.get()](uint64_t i, bench::LoadDone done) {
            std::string id = fmt::format("req-{}-{}", step_no, i);
            std::string body = completion_body(id);
            const auto sent = Clock::now();
            c->request(
                0, "POST", "/v1/completions", std::move(body), std::chrono::seconds(2),
                [&arrivals, id = std::move(id), sent,
                 done = std::move(done)](http::AsyncResponse r) {
                  const auto at = arrivals.take(id);
                  const bool ok = r.status == 200 && at.has_value();
                  done(ok, ok ? std::chrono::duration<double, std::milli>(*at - sent).count() : 0);
                });
          };
        } else {
          ext_proc = std::make_unique<bench::ExtProcLoad>(
              xport, static_cast<int>(o.integer("ext-proc-channels", 1, 64)));
          t.start = [&, x = ext_proc.get()](uint64_t i, bench::LoadDone done) {
            x->start(completion_body(fmt::format("req-{}-{}", step_no, i)), std::move(done));
          };
        }
        bench::StepPlan plan;
        plan.duration_s = duration;
        if (std::find(pool_sizes.begin(), pool_sizes.end(), pods_d) != pool_sizes.end()) {
          for (double rate : rates) {
            ++step_no;
            steps.push_back(t.measure(rate, plan));
          }
        }
        if (pods == capacity_pods) {
          plan.duration_s = capacity_duration;
          Json best;
          bool any_failed = false;
          const double cap = bench::capacity_search(
              o.number("capacity-from", 1, 1e6), o.number("capacity-max", 1, 1e6), bisections, 100,
              [&](double rate) {
                ++step_no;
                Json s = t.measure(rate, plan);
                s["verdict"] = verdict(s, p99_limit);
                const bool pass = s["verdict"].get<std::string>().empty();
                any_failed = any_failed || !pass;
                if (pass && (best.is_null() || rate > best["offered_rps"].get<double>())) {
                  best = s;
                }
                search.push_back(s);
                return pass;
              });
          Json row{{"mode", mode},
                   {"pods", pods},
                   {"capacity_rps", cap},
                   {"step", best},
                   {"capped_by_max", !any_failed}};
          capacity.push_back(row);
        }
        proxy_client.reset();
        ext_proc.reset();
      }
    }
    const std::string label = o.str("label").empty() ? "unlabelled" : o.str("label");
    Json run{{"label", label},
             {"command", bench::command_line(argc, argv)},
             {"date", util::now_rfc3339()},
             {"cpu", bench::cpu_model()},
             {"cores", std::thread::hardware_concurrency()},
             {"quick", quick},
             {"pod_threads", pod_threads},
             {"predictors", predictors.size()},
             {"in_process", in_process},
             {"step_s", duration},
             {"ext_proc_channels", o.integer("ext-proc-channels", 1, 64)},
             {"capacity_step_s", capacity_duration},
             {"capacity_p99_ms", p99_limit},
             {"steps", steps},
             {"capacity", capacity},
             {"capacity_search", search}};
    const std::string md = bench::epp_overhead_markdown(run);
    std::cout << md << std::endl;
    util::write_file_atomic(o.str("out") + ".md", md);
    bench::save_labelled_run(o.str("out") + ".json", run);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "epp_overhead: " << e.what() << std::endl;
    return 1;
  }
}
