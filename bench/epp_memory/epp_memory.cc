// EPP memory (issue 29), two scenarios against a modelsim pool and the real EPP on loopback:
// - long prompts: N streamed completions with prompts of about M MiB each sent at once; the
//   EPP's VmHWM (peak) after all answers and its VmRSS 10 s later (memory given back);
// - slow readers (--slow-readers N): N clients ask for long streams and never read them (a
//   4-KiB receive buffer); the EPP's peak while the pod keeps generating, against its baseline;
// - gateway mode (--ext-proc): the long prompts as a gateway sends them over ext_proc (BUFFERED:
//   each body in one gRPC message, on one HTTP/2 connection as Envoy's few), up to the pick.
// Prints a table and writes bench/results/epp_memory.{md,json} (one row per label; a row with
// the same label is replaced).
//
//   epp_memory [--concurrency 16] [--prompt-mib 16] [--max-tokens 200] [--slow-readers 0]
//              [--ext-proc] [--label NAME] [--out-dir DIR]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/common/bench_results.h"
#include "common/config/options.h"
#include "common/http/client.h"
#include "common/util/time.h"
#include "tests/epp/extproc/buffered_exchange.h"
#include "tests/support/process.h"

namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using llmd::testing::Process;

struct Options {
  int concurrency = 16;
  double prompt_mib = 16;
  int max_tokens = 200;
  int slow_readers = 0;
  bool ext_proc = false;
  std::string label;
  std::string out_dir;
};

struct Result {
  std::string label;
  int concurrency = 0;
  double body_mib = 0;
  int ok = 0;
  int other = 0;
  double baseline_mib = 0, peak_mib = 0, after_mib = 0, seconds = 0;
  std::string date;
};

// A completion body just under `mib` MiB (the EPP's default body limit is 16 MiB): 200-byte
// words, so the prompt stays within the simulated model's context.
std::string make_body(double mib, int max_tokens, int i) {
  const std::size_t target = static_cast<std::size_t>(mib * 1024 * 1024) - 512;
  std::string prompt = "request " + std::to_string(i) + " ";
  prompt.reserve(target);
  const std::string word = std::string(199, static_cast<char>('a' + i % 26)) + " ";
  while (prompt.size() + word.size() < target) {
    prompt += word;
  }
  return Json{{"model", "meta-llama/Llama-3.1-8B-Instruct"},
              {"prompt", std::move(prompt)},
              {"max_tokens", max_tokens},
              {"stream", true}}
      .dump();
}

// One modelsim pod (simulated time `time_scale` x faster than wall time) and the real EPP.
struct Stack {
  explicit Stack(int time_scale, bool with_ext_proc = false) {
    pod_port = llmd::testing::free_port();
    modelsim = std::make_unique<Process>(
        std::string(LLMD_BINARY_DIR) + "/bench/modelsim/modelsim",
        std::vector<std::string>{"--pods", "1", "--base-port", std::to_string(pod_port), "--host",
                                 "127.0.0.1", "--time-scale", std::to_string(time_scale)});
    if (!modelsim->wait_http_ok(pod_port, "/health")) {
      throw std::runtime_error("modelsim did not start:\n" + modelsim->log());
    }
    std::ofstream(dir.file("pool.yaml"))
        << "pool:\n  pods:\n  - {name: pod-0, address: 127.0.0.1:" << pod_port << "}\n"
        << "pipeline: " << LLMD_SOURCE_DIR << "/epp/config/default-pipeline.yaml\n";
    port = llmd::testing::free_port();
    const uint16_t health = llmd::testing::free_port(), metrics = llmd::testing::free_port();
    std::vector<std::string> args{
        "--config",       dir.file("pool.yaml"),   "--host",        "127.0.0.1",
        "--port",         std::to_string(port),    "--health-port", std::to_string(health),
        "--metrics-port", std::to_string(metrics), "--log-level",   "warn"};
    if (with_ext_proc) {
      ext_proc_port = llmd::testing::free_port();
      args.insert(args.end(), {"--ext-proc-port", std::to_string(ext_proc_port)});
    }
    epp = std::make_unique<Process>(std::string(LLMD_BINARY_DIR) + "/epp/epp", args);
    if (!epp->wait_http_ok(health, "/readyz")) {
      throw std::runtime_error("epp did not start:\n" + epp->log());
    }
  }
  llmd::testing::TempDir dir;
  std::unique_ptr<Process> modelsim, epp;
  uint16_t port = 0;
  uint16_t ext_proc_port = 0;
  uint16_t pod_port = 0;
};

// A client that asks for a stream and never reads it, with a small receive buffer so the
// EPP's side fills after a few KiB.
int slow_reader(uint16_t port, const std::string& request) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  int small = 4096;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
          static_cast<ssize_t>(request.size())) {
    ::close(fd);
    return -1;
  }
  return fd;
}

Result run_slow_readers(const Options& opt) {
  Stack stack(100);
  Result r;
  r.label = opt.label;
  r.concurrency = opt.slow_readers;
  r.date = llmd::util::now_rfc3339();
  const std::string body = Json{
      {"model", "meta-llama/Llama-3.1-8B-Instruct"},
      {"prompt", "tell me everything"},
      {"max_tokens", 100000},
      {"stream", true}}.dump();
  const std::string request =
      "POST /v1/completions HTTP/1.1\r\nHost: epp\r\n"
      "Content-Type: application/json\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  r.body_mib = static_cast<double>(body.size()) / (1024 * 1024);
  r.baseline_mib = stack.epp->status_mib("VmRSS");
  std::vector<int> fds;
  for (int i = 0; i < opt.slow_readers; ++i) {
    const int fd = slow_reader(stack.port, request);
    (fd >= 0 ? r.ok : r.other) += 1;
    fds.push_back(fd);
  }
  // The pod generates 100x faster than real time: 20 s is ~2M tokens of streams on offer.
  const auto t0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::seconds(20));
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  r.peak_mib = stack.epp->status_mib("VmHWM");
  for (int fd : fds) {
    if (fd >= 0) {
      ::close(fd);
    }
  }
  std::this_thread::sleep_for(std::chrono::seconds(10));
  r.after_mib = stack.epp->status_mib("VmRSS");
  return r;
}

Result run(const Options& opt) {
  Stack stack(1, opt.ext_proc);
  Process& epp = *stack.epp;
  const uint16_t port = stack.port;
  Result r;
  r.label = opt.label;
  r.concurrency = opt.concurrency;
  r.date = llmd::util::now_rfc3339();
  std::vector<std::string> bodies;
  for (int i = 0; i < opt.concurrency; ++i) {
    bodies.push_back(make_body(opt.prompt_mib, opt.max_tokens, i));
  }
  r.body_mib = static_cast<double>(bodies[0].size()) / (1024 * 1024);
  r.baseline_mib = epp.status_mib("VmRSS");
  std::atomic<int> ok{0}, other{0};
  const auto t0 = Clock::now();
  std::vector<std::thread> senders;
  std::shared_ptr<grpc::Channel> gateway;
  if (opt.ext_proc) {
    grpc::ChannelArguments args;
    args.SetMaxSendMessageSize(-1);
    gateway = grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(stack.ext_proc_port),
                                        grpc::InsecureChannelCredentials(), args);
  }
  for (int i = 0; i < opt.concurrency; ++i) {
    senders.emplace_back([&, i] {
      const std::string& body = bodies[static_cast<std::size_t>(i)];
      bool done = false;
      if (gateway) {
        // Up to the pick: the memory is the body's, the pod's answer does not pass the EPP.
        llmd::testing::BufferedExchange x(gateway);
        done = x.headers() && x.body(body) == "127.0.0.1:" + std::to_string(stack.pod_port);
        x.finish();
      } else {
        llmd::http::HttpClient c("127.0.0.1", port, std::chrono::seconds(300));
        const auto res = c.post("/v1/completions", body);
        done = res.status == 200 && res.body.find("[DONE]") != std::string::npos;
      }
      (done ? ok : other) += 1;
    });
  }
  for (auto& t : senders) {
    t.join();
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  r.ok = ok;
  r.other = other;
  r.peak_mib = epp.status_mib("VmHWM");
  std::this_thread::sleep_for(std::chrono::seconds(10));
  r.after_mib = epp.status_mib("VmRSS");
  return r;
}

Json to_json(const Result& r) {
  return Json{{"label", r.label},           {"concurrency", r.concurrency},
              {"body_mib", r.body_mib},     {"ok", r.ok},
              {"other", r.other},           {"baseline_rss_mib", r.baseline_mib},
              {"peak_rss_mib", r.peak_mib}, {"rss_10s_after_mib", r.after_mib},
              {"seconds", r.seconds},       {"date", r.date}};
}

std::string table(const Json& rows) {
  std::string out =
      "| label | prompts at once | body MiB | streams completed | other | baseline RSS MiB | "
      "peak RSS MiB | RSS 10 s after MiB | seconds | date |\n"
      "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n";
  for (const auto& r : rows) {
    out += fmt::format("| {} | {} | {:.1f} | {} | {} | {:.0f} | {:.0f} | {:.0f} | {:.1f} | {} |\n",
                       r["label"].get<std::string>(), r["concurrency"].get<int>(),
                       r["body_mib"].get<double>(), r["ok"].get<int>(), r["other"].get<int>(),
                       r["baseline_rss_mib"].get<double>(), r["peak_rss_mib"].get<double>(),
                       r["rss_10s_after_mib"].get<double>(), r["seconds"].get<double>(),
                       r["date"].get<std::string>());
  }
  return out;
}

void write_results(const Options& opt, const Result& r) {
  const nlohmann::json rows =
      llmd::bench::save_labelled_run(opt.out_dir + "/epp_memory.json", to_json(r));
  std::ofstream(opt.out_dir + "/epp_memory.md")
      << "# EPP memory under concurrent long prompts\n\n"
         "`bench/epp_memory`: one modelsim pod and the real EPP (default flags: 16 MiB body "
         "limit, 256 MiB body budget), N streamed completions with prompts just under the "
         "limit sent at once on loopback. *peak RSS* is the EPP's VmHWM after every answer, "
         "*RSS 10 s after* what it holds once the burst is over. Goal (issue 29): 16 x 16 MiB "
         "-> peak <= 600 MiB and <= 150 MiB 10 s later. Slow-reader rows (`--slow-readers N`): "
         "N clients with a 4-KiB receive buffer ask for 100,000-token streams from a pod "
         "running 100x faster than real time and never read; *streams completed* counts the "
         "clients connected, *peak* is taken after 20 s of generation, *RSS 10 s after* once "
         "they hung up. Goal: RSS growth <= 64 MiB for 100. Gateway rows (`--ext-proc`): the same "
         "prompts as BUFFERED ext_proc bodies (one gRPC message each) on one HTTP/2 connection, "
         "up to the pick. Each row is one run of `build/bench/epp_memory --label <label>` with the "
         "options its columns show (`--concurrency`, `--prompt-mib`, `--slow-readers`, "
         "`--ext-proc`), on the build its label names; `bench/run_reports.sh memory` reruns the "
         "defaults, the slow readers and gateway mode.\n\n"
      << table(rows);
}

int main_impl(int argc, char** argv) {
  llmd::config::Options o("epp_memory", "EPP memory under concurrent long prompts");
  o.add("concurrency", "", "16", "Prompts sent at once");
  o.add("prompt-mib", "", "16", "Size of each request body (MiB; the EPP's limit is 16)");
  o.add("max-tokens", "", "200", "Tokens each streamed answer asks for");
  o.add("slow-readers", "", "0",
        "Instead: this many clients that ask for long streams and never read them");
  o.add("ext-proc", "", "false", "The long prompts through the gateway port (ext_proc) instead");
  o.add("label", "", "current", "Row label (a row with the same label is replaced)");
  o.add("out-dir", "", std::string(LLMD_SOURCE_DIR) + "/bench/results", "Where results go");
  if (!o.parse(argc, argv)) {
    return 0;
  }
  Options opt;
  opt.concurrency = static_cast<int>(o.integer("concurrency", 1, 1024));
  opt.prompt_mib = o.number("prompt-mib", 0.01, 16);
  opt.max_tokens = static_cast<int>(o.integer("max-tokens", 1, 100000));
  opt.slow_readers = static_cast<int>(o.integer("slow-readers", 0, 10000));
  opt.ext_proc = o.boolean("ext-proc");
  opt.label = o.str("label");
  opt.out_dir = o.str("out-dir");
  const Result r = opt.slow_readers > 0 ? run_slow_readers(opt) : run(opt);
  std::cout << table(Json::array({to_json(r)}));
  write_results(opt, r);
  return r.ok == r.concurrency ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return main_impl(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "epp_memory: " << e.what() << "\n";
    return 1;
  }
}
