// Trainer peak memory under concurrent large bulk uploads (issue 30): starts the real trainer
// binary, sends N bulk bodies of ~M MB each at once on loopback, and reads the trainer's VmHWM
// from /proc/<pid>/status. Prints a table and writes bench/results/trainer_bulk_memory.{md,json}
// (one row per --label; an existing row with the same label is replaced, so "before" and "after"
// runs land in one table).
//
//   trainer_bulk_memory [--concurrency 16] [--body-mb 15] [--rounds 1] [--label NAME]
//                       [--trainer-bin PATH] [--out-dir DIR] [--io-threads N]
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/common/bench_results.h"
#include "common/http/client.h"
#include "common/util/time.h"
#include "tests/support/process.h"

namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Options {
  int concurrency = 16;
  double body_mb = 15;  // 10^6 bytes
  int rounds = 1;
  int io_threads = 0;  // 0 = the trainer's default
  std::string label = "current";
  std::string trainer_bin = std::string(LLMD_BINARY_DIR) + "/trainer/trainer";
  std::string out_dir = std::string(LLMD_SOURCE_DIR) + "/bench/results";
};

// One bulk body of about `bytes` bytes: entries shaped like the EPP's feedback (every feature,
// actuals, predictions, pod type and timestamp), values varied so numbers have mixed lengths.
std::string make_body(std::size_t bytes, uint64_t seed, const std::string& batch_id,
                      std::size_t& entries) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::string body = "{\"entries\":[";
  body.reserve(bytes + 1024);
  entries = 0;
  const std::string ts = llmd::util::now_rfc3339();
  while (body.size() + 600 < bytes) {
    if (entries > 0) {
      body += ',';
    }
    const double kv = unit(rng);
    const int input = 16 + static_cast<int>(unit(rng) * 4000);
    const int waiting = static_cast<int>(unit(rng) * 8);
    const int running = static_cast<int>(unit(rng) * 32);
    const double prefix = unit(rng);
    const double ttft = 20 + input * 0.05 + waiting * 30 + unit(rng) * 10;
    const double tpot = 5 + running * 0.3 + unit(rng);
    body += fmt::format(
        "{{\"kv_cache_percentage\":{:.6f},\"input_token_length\":{},\"num_request_waiting\":{},"
        "\"num_request_running\":{},\"num_tokens_generated\":{},\"prefix_cache_score\":{:.6f},"
        "\"pod_type\":\"{}\",\"actual_ttft_ms\":{:.4f},\"actual_tpot_ms\":{:.4f},"
        "\"predicted_ttft_ms\":{:.4f},\"predicted_tpot_ms\":{:.4f},\"timestamp\":\"{}\"}}",
        kv, input, waiting, running, 1 + static_cast<int>(unit(rng) * 200), prefix,
        entries % 2 == 0 ? "prefill" : "decode", ttft, tpot, ttft * 1.1, tpot * 1.1, ts);
    ++entries;
  }
  body += "],\"batch_id\":\"" + batch_id + "\"}";
  return body;
}

struct Result {
  std::string label;
  int concurrency = 0;
  double body_mb = 0;
  std::size_t entries_per_body = 0;
  int rounds = 0;
  int accepted = 0;  // 202
  int refused = 0;   // 503 (body budget) or other
  double baseline_mib = 0;
  double peak_mib = 0;
  double rss_after_mib = 0;
  double seconds = 0;
  std::string date;
};

Result run(const Options& opt) {
  llmd::testing::TempDir dir;
  const uint16_t port = llmd::testing::free_port();
  std::vector<std::string> args = {"--host",
                                   "127.0.0.1",
                                   "--port",
                                   std::to_string(port),
                                   "--ttft-model-path",
                                   dir.file("ttft.ubj"),
                                   "--tpot-model-path",
                                   dir.file("tpot.ubj"),
                                   "--ttft-gated-model-path",
                                   dir.file("ttft_gated.bin"),
                                   "--tpot-gated-model-path",
                                   dir.file("tpot_gated.bin"),
                                   "--fit-threads",
                                   "1",
                                   "--retraining-interval",
                                   "3600",
                                   "--snapshot-interval",
                                   "3600",
                                   "--log-level",
                                   "warn"};
  if (opt.io_threads > 0) {
    args.insert(args.end(), {"--io-threads", std::to_string(opt.io_threads)});
  }
  llmd::testing::Process trainer(opt.trainer_bin, args);
  if (!trainer.wait_http_ok(port)) {
    throw std::runtime_error("trainer did not start:\n" + trainer.log());
  }
  Result r;
  r.label = opt.label;
  r.concurrency = opt.concurrency;
  r.body_mb = opt.body_mb;
  r.rounds = opt.rounds;
  r.date = llmd::util::now_rfc3339();
  r.baseline_mib = trainer.status_mib("VmRSS");
  std::vector<std::string> bodies(static_cast<std::size_t>(opt.concurrency));
  for (int i = 0; i < opt.concurrency; ++i) {
    bodies[i] = make_body(static_cast<std::size_t>(opt.body_mb * 1e6), 1000 + i,
                          fmt::format("bench:{}", i), r.entries_per_body);
  }
  std::atomic<int> accepted{0};
  std::atomic<int> refused{0};
  const auto t0 = Clock::now();
  for (int round = 0; round < opt.rounds; ++round) {
    std::vector<std::thread> senders;
    for (int i = 0; i < opt.concurrency; ++i) {
      senders.emplace_back([&, i, round] {
        llmd::http::HttpClient c("127.0.0.1", port, std::chrono::seconds(300));
        std::string body = bodies[i];
        // A distinct batch id per round: later rounds are ingested, not answered as duplicates.
        body.replace(body.rfind("bench:"), 0, fmt::format("r{}-", round));
        const int status = c.post("/add_training_data_bulk", body).status;
        (status == 202 ? accepted : refused) += 1;
      });
    }
    for (auto& t : senders) {
      t.join();
    }
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  r.accepted = accepted;
  r.refused = refused;
  r.peak_mib = trainer.status_mib("VmHWM");
  r.rss_after_mib = trainer.status_mib("VmRSS");
  return r;
}

Json to_json(const Result& r) {
  return Json{{"label", r.label},           {"concurrency", r.concurrency},
              {"body_mb", r.body_mb},       {"entries_per_body", r.entries_per_body},
              {"rounds", r.rounds},         {"accepted", r.accepted},
              {"refused", r.refused},       {"baseline_rss_mib", r.baseline_mib},
              {"peak_rss_mib", r.peak_mib}, {"rss_after_mib", r.rss_after_mib},
              {"seconds", r.seconds},       {"date", r.date}};
}

std::string table(const Json& rows) {
  std::string out =
      "| label | bulks at once | body MB | entries/body | rounds | 202 | other | "
      "baseline RSS MiB | peak RSS MiB | RSS after MiB | seconds | date |\n"
      "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n";
  for (const auto& r : rows) {
    out += fmt::format(
        "| {} | {} | {:.1f} | {} | {} | {} | {} | {:.0f} | {:.0f} | {:.0f} | "
        "{:.1f} | {} |\n",
        r["label"].get<std::string>(), r["concurrency"].get<int>(), r["body_mb"].get<double>(),
        r["entries_per_body"].get<std::size_t>(), r["rounds"].get<int>(), r["accepted"].get<int>(),
        r["refused"].get<int>(), r["baseline_rss_mib"].get<double>(),
        r["peak_rss_mib"].get<double>(), r["rss_after_mib"].get<double>(),
        r["seconds"].get<double>(), r["date"].get<std::string>());
  }
  return out;
}

void write_results(const Options& opt, const Result& r) {
  const nlohmann::json rows =
      llmd::bench::save_labelled_run(opt.out_dir + "/trainer_bulk_memory.json", to_json(r));
  std::ofstream md(opt.out_dir + "/trainer_bulk_memory.md");
  md << "# Trainer peak memory under concurrent bulk uploads\n\n"
        "`bench/trainer_bulk_memory`: the real trainer binary (default flags, retraining and "
        "snapshots pushed out to 1 h), N valid `/add_training_data_bulk` bodies of the given "
        "size sent at once on loopback, each with its own `batch_id`. *peak RSS* is the "
        "trainer's VmHWM after all answers; *baseline* its VmRSS before the first upload. The "
        "default request-body budget (256 MiB) admits 16 x 15 MB at once. Goal (issue 30): "
        "16 x 15 MB -> peak <= 300 MiB. Each row is one run of `build/bench/trainer_bulk_memory "
        "--label <label>` with the options its columns show (`--concurrency`, `--body-mb`, "
        "`--rounds`), on the build its label names; `bench/run_reports.sh memory` reruns the "
        "defaults as `current`.\n\n"
     << table(rows);
}

int main_impl(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        throw std::runtime_error("missing value for " + a);
      }
      return argv[++i];
    };
    if (a == "--concurrency") {
      opt.concurrency = std::stoi(next());
    } else if (a == "--body-mb") {
      opt.body_mb = std::stod(next());
    } else if (a == "--rounds") {
      opt.rounds = std::stoi(next());
    } else if (a == "--io-threads") {
      opt.io_threads = std::stoi(next());
    } else if (a == "--label") {
      opt.label = next();
    } else if (a == "--trainer-bin") {
      opt.trainer_bin = next();
    } else if (a == "--out-dir") {
      opt.out_dir = next();
    } else {
      std::cerr << "usage: trainer_bulk_memory [--concurrency N] [--body-mb MB] [--rounds N] "
                   "[--io-threads N] [--label NAME] [--trainer-bin PATH] [--out-dir DIR]\n";
      return 2;
    }
  }
  const Result r = run(opt);
  std::cout << table(Json::array({to_json(r)}));
  write_results(opt, r);
  return r.accepted == opt.concurrency * opt.rounds ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return main_impl(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "trainer_bulk_memory: " << e.what() << "\n";
    return 1;
  }
}
