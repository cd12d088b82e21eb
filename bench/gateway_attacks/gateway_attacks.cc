// Issue 49's attacks on the ext_proc (gateway) port, replayed against the real EPP with a victim
// client beside them. Each attack runs for a fixed time while the victim sends one proxy
// completion every 50 ms and one gateway pick every 100 ms; then the attacker goes away (or
// stays silent) and the EPP's descriptors and in-flight counts are watched until they are back.
// Per attack: the victim's proxy p50/p99 during it against its idle p99, its picks served, the
// EPP's peak RSS and descriptors, what the attacker achieved, and how long the release took.
//
// The attacks (hostile peers from tests/support/raw_h2_peer.h, the ext_proc protocol from the
// generated messages): announced-length prefixes, a 2-MiB newline body and an endless line
// through the SSE scanner, an HPACK bomb, a peer that never gives its window back, a silent
// gateway holding picks, preface-only connections (3,000; and 400 at `ulimit -n 256`), and a
// truncated message. The config sets extProc.streamIdleTimeoutMs to 5 s so the silent gateway's
// release fits the run; every other limit is at its default.
//
// Prints a table and writes bench/results/gateway_attacks.{md,json}.
//
//   gateway_attacks [--seconds 10] [--out-dir DIR]
#include <dirent.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>

#include "bench/common/bench_stats.h"
#include "common/config/options.h"
#include "common/http/client.h"
#include "common/util/time.h"
#include "epp/extproc/external_processor.grpc.pb.h"
#include "tests/epp/extproc/buffered_exchange.h"
#include "tests/epp/extproc/ext_proc_messages.h"
#include "tests/support/process.h"
#include "tests/support/raw_h2_peer.h"

namespace {

namespace pb = envoy::service::ext_proc::v3;
using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using llmd::testing::Process;
using llmd::testing::RawPeer;
constexpr char kProcess[] = "/envoy.service.ext_proc.v3.ExternalProcessor/Process";

// One modelsim pool of two pods and the real EPP in proxy and gateway mode.
struct Stack {
  explicit Stack(int max_open_files = 0) {
    pod_port = llmd::testing::free_port_block(2);
    modelsim = std::make_unique<Process>(
        llmd::testing::binary("bench/modelsim/modelsim"),
        std::vector<std::string>{"--pods", "2", "--base-port", std::to_string(pod_port), "--host",
                                 "127.0.0.1"});
    for (int i = 0; i < 2; ++i) {
      if (!modelsim->wait_http_ok(static_cast<uint16_t>(pod_port + i), "/health")) {
        throw std::runtime_error("modelsim did not start:\n" + modelsim->log());
      }
    }
    std::ofstream(dir.file("pool.yaml"))
        << "pool:\n  pods:\n"
        << "  - {name: pod-0, address: 127.0.0.1:" << pod_port << "}\n"
        << "  - {name: pod-1, address: 127.0.0.1:" << pod_port + 1 << "}\n"
        << "pipeline: " << LLMD_SOURCE_DIR << "/epp/config/default-pipeline.yaml\n"
        << "extProc: {streamIdleTimeoutMs: 5000}\n";
    port = llmd::testing::free_port();
    health = llmd::testing::free_port();
    metrics = llmd::testing::free_port();
    ext_proc = llmd::testing::free_port();
    epp = std::make_unique<Process>(
        llmd::testing::binary("epp/epp"),
        std::vector<std::string>{"--config", dir.file("pool.yaml"), "--host", "127.0.0.1", "--port",
                                 std::to_string(port), "--health-port", std::to_string(health),
                                 "--metrics-port", std::to_string(metrics), "--ext-proc-port",
                                 std::to_string(ext_proc), "--log-level", "warn"},
        std::vector<std::string>{}, max_open_files);
    if (!epp->wait_http_ok(health, "/readyz")) {
      throw std::runtime_error("epp did not start:\n" + epp->log());
    }
  }
  int fds() const {
    int n = 0;
    if (DIR* d = ::opendir(fmt::format("/proc/{}/fd", epp->pid()).c_str())) {
      while (::readdir(d) != nullptr) {
        ++n;
      }
      ::closedir(d);
    }
    return std::max(0, n - 2);
  }
  // The sum of llmd_epp_pod_in_flight over the pods (-1: unreadable).
  double in_flight() const {
    llmd::http::HttpClient c("127.0.0.1", metrics, std::chrono::seconds(5));
    const auto r = c.get("/metrics");
    if (r.status != 200) {
      return -1;
    }
    double sum = 0;
    std::size_t at = 0;
    while ((at = r.body.find("\nllmd_epp_pod_in_flight{", at)) != std::string::npos) {
      const std::size_t space = r.body.find(' ', r.body.find('}', at));
      sum += std::stod(r.body.substr(space + 1, r.body.find('\n', space + 1) - space - 1));
      at = space;
    }
    return sum;
  }
  std::string ext_proc_target() const { return "127.0.0.1:" + std::to_string(ext_proc); }

  llmd::testing::TempDir dir;
  std::unique_ptr<Process> modelsim, epp;
  uint16_t pod_port = 0, port = 0, health = 0, metrics = 0, ext_proc = 0;
};

// The victim: a proxy completion every 50 ms and a gateway pick every 100 ms, with the EPP's
// RSS and descriptors sampled beside them. A window is what happened since the last take().
class Victim {
 public:
  struct Window {
    std::vector<double> proxy_ms;
    int proxy_failed = 0, picks_ok = 0, picks_failed = 0;
    double peak_rss_mib = 0;
    int peak_fds = 0;
  };
  explicit Victim(const Stack& stack) : stack_(stack) {
    threads_.emplace_back([this] { proxy_loop(); });
    threads_.emplace_back([this] { pick_loop(); });
    threads_.emplace_back([this] { sample_loop(); });
  }
  ~Victim() {
    stop_ = true;
    for (auto& t : threads_) {
      t.join();
    }
  }
  Window take() {
    std::lock_guard lock(mu_);
    return std::exchange(window_, Window{});
  }

 private:
  void proxy_loop() {
    const std::string body =
        R"({"model":"meta-llama/Llama-3.1-8B-Instruct","prompt":"hello there","max_tokens":2})";
    while (!stop_) {
      const auto t0 = Clock::now();
      llmd::http::HttpClient c("127.0.0.1", stack_.port, std::chrono::seconds(10));
      const auto r = c.post("/v1/completions", body);
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      {
        std::lock_guard lock(mu_);
        if (r.status == 200) {
          window_.proxy_ms.push_back(ms);
        } else {
          ++window_.proxy_failed;
        }
      }
      std::this_thread::sleep_until(t0 + std::chrono::milliseconds(50));
    }
  }
  void pick_loop() {
    auto channel =
        grpc::CreateChannel(stack_.ext_proc_target(), grpc::InsecureChannelCredentials());
    while (!stop_) {
      const auto t0 = Clock::now();
      bool ok = false;
      {
        llmd::testing::BufferedExchange x(channel);
        ok = x.headers() && !x.body().empty();
        x.finish();
      }
      {
        std::lock_guard lock(mu_);
        (ok ? window_.picks_ok : window_.picks_failed) += 1;
      }
      std::this_thread::sleep_until(t0 + std::chrono::milliseconds(100));
    }
  }
  void sample_loop() {
    while (!stop_) {
      const double rss = stack_.epp->status_mib("VmRSS");
      const int fds = stack_.fds();
      {
        std::lock_guard lock(mu_);
        window_.peak_rss_mib = std::max(window_.peak_rss_mib, rss);
        window_.peak_fds = std::max(window_.peak_fds, fds);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

  const Stack& stack_;
  std::mutex mu_;
  Window window_;  // guarded by mu_
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

struct Row {
  std::string attack, attacker;
  double idle_p99 = 0, p50 = 0, p99 = 0;
  int proxy_failed = 0, picks_ok = 0, picks_failed = 0;
  double peak_rss = 0, rss_after = 0;
  int peak_fds = 0, fds_before = 0;
  double epp_cpu_s = 0, idle_cpu_s = 0;  // the EPP's CPU during the attack / the idle 5 s
  std::string released;
};

std::string framed(const pb::ProcessingRequest& m) {
  const std::string bytes = m.SerializeAsString();
  return llmd::testing::grpc_prefix(0, static_cast<uint32_t>(bytes.size())) + bytes;
}

pb::ProcessingRequest request_headers(bool stream_response) {
  pb::ProcessingRequest m;
  auto* h = m.mutable_request_headers()->mutable_headers();
  *h->add_headers() = llmd::testing::header(":method", "POST");
  *h->add_headers() = llmd::testing::header(":path", "/v1/completions");
  *h->add_headers() = llmd::testing::header("content-type", "application/json");
  if (stream_response) {
    m.mutable_protocol_config()->set_response_body_mode(pb::FULL_DUPLEX_STREAMED);
  }
  return m;
}

pb::ProcessingRequest request_body() {
  pb::ProcessingRequest m;
  m.mutable_request_body()->set_body(
      R"({"model":"meta-llama/Llama-3.1-8B-Instruct","prompt":"hello","max_tokens":2,"stream":true})");
  m.mutable_request_body()->set_end_of_stream(true);
  return m;
}

pb::ProcessingRequest response_headers() {
  pb::ProcessingRequest m;
  auto* h = m.mutable_response_headers()->mutable_headers();
  *h->add_headers() = llmd::testing::header(":status", "200");
  *h->add_headers() = llmd::testing::header("content-type", "text/event-stream");
  return m;
}

pb::ProcessingRequest response_body(std::string bytes, bool end) {
  pb::ProcessingRequest m;
  m.mutable_response_body()->set_body(std::move(bytes));
  m.mutable_response_body()->set_end_of_stream(end);
  return m;
}

// Complete gRPC messages in `data` (a stream's response DATA).
int messages_in(const std::string& data) {
  int n = 0;
  std::size_t at = 0;
  while (at + 5 <= data.size()) {
    const auto* p = reinterpret_cast<const unsigned char*>(data.data() + at + 1);
    const std::size_t len = (std::size_t{p[0]} << 24) | (p[1] << 16) | (p[2] << 8) | p[3];
    if (at + 5 + len > data.size()) {
      break;
    }
    at += 5 + len;
    ++n;
  }
  return n;
}

// A gateway stream up to its pick: request headers and body sent, both answers read.
int32_t picked_stream(RawPeer& peer, bool stream_response) {
  const int32_t id =
      peer.open(kProcess, framed(request_headers(stream_response)) + framed(request_body()), false);
  peer.pump([&] { return messages_in(peer.data[id]) >= 2 || peer.closed.count(id) > 0; });
  return id;
}

// The victim alone for 5 s: its proxy p99, and the EPP's CPU seconds per second meanwhile.
struct Idle {
  double p99 = 0, cpu_per_s = 0;
};
Idle measure_idle(const Stack& stack, Victim& victim) {
  const std::string stat = fmt::format("/proc/{}/stat", stack.epp->pid());
  victim.take();
  const double cpu0 = llmd::bench::process_cpu_seconds(stat);
  std::this_thread::sleep_for(std::chrono::seconds(5));
  return {llmd::bench::percentile(victim.take().proxy_ms, 0.99),
          (llmd::bench::process_cpu_seconds(stat) - cpu0) / 5};
}

// Runs `attack` for `seconds` beside the victim, then waits (bounded) for `released`.
template <typename Attack, typename Released>
Row run(Stack& stack, Victim& victim, const Idle& idle, const std::string& name,
        std::chrono::seconds seconds, Attack attack, Released released) {
  Row row;
  row.attack = name;
  row.idle_p99 = idle.p99;
  row.idle_cpu_s = idle.cpu_per_s * static_cast<double>(seconds.count());
  row.fds_before = stack.fds();
  victim.take();
  const std::string stat = fmt::format("/proc/{}/stat", stack.epp->pid());
  const double cpu0 = llmd::bench::process_cpu_seconds(stat);
  row.attacker = attack(Clock::now() + seconds);
  row.epp_cpu_s = llmd::bench::process_cpu_seconds(stat) - cpu0;
  const Victim::Window w = victim.take();
  row.p50 = llmd::bench::percentile(w.proxy_ms, 0.5);
  row.p99 = llmd::bench::percentile(w.proxy_ms, 0.99);
  row.proxy_failed = w.proxy_failed;
  row.picks_ok = w.picks_ok;
  row.picks_failed = w.picks_failed;
  row.peak_rss = w.peak_rss_mib;
  row.peak_fds = w.peak_fds;
  const auto t0 = Clock::now();
  const auto bound = t0 + std::chrono::seconds(60);
  while (!released() && Clock::now() < bound) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  row.released =
      released() ? fmt::format("{:.1f} s", std::chrono::duration<double>(Clock::now() - t0).count())
                 : "not within 60 s";
  row.rss_after = stack.epp->status_mib("VmRSS");
  return row;
}

std::vector<Row> attacks(std::chrono::seconds seconds) {
  std::vector<Row> rows;
  Stack stack;
  Victim victim(stack);
  const Idle idle = measure_idle(stack, victim);
  const int base_fds = stack.fds();
  const auto fds_back = [&] { return stack.fds() <= base_fds + 4; };
  const auto pump_until = [](RawPeer& p, Clock::time_point end) {
    p.pump([] { return false; },
           std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()));
  };

  rows.push_back(run(
      stack, victim, idle, "1. 16 prefixes announcing 16 MiB, nothing after", seconds,
      [&](Clock::time_point end) {
        RawPeer p(stack.ext_proc);
        for (int i = 0; i < 16; ++i) {
          p.open(kProcess, llmd::testing::grpc_prefix(0, 16 << 20), false);
        }
        pump_until(p, end);
        return fmt::format("{} of 16 streams still open", 16 - p.closed.size());
      },
      fds_back));

  rows.push_back(run(
      stack, victim, idle, "2a. a 2-MiB response body of newlines", seconds,
      [&](Clock::time_point end) {
        RawPeer p(stack.ext_proc);
        const int32_t id = picked_stream(p, true);
        const auto t0 = Clock::now();
        p.continue_body(
            id,
            framed(response_headers()) + framed(response_body(std::string(2 << 20, '\n'), true)),
            true);
        p.pump([&] { return messages_in(p.data[id]) >= 4; });
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        pump_until(p, end);
        return fmt::format("answered in {:.0f} ms", ms);
      },
      fds_back));

  rows.push_back(run(
      stack, victim, idle, "2b. a 32-MiB SSE line that never ends", seconds,
      [&](Clock::time_point end) {
        RawPeer p(stack.ext_proc);
        const int32_t id = picked_stream(p, true);
        p.continue_body(id, framed(response_headers()), false);
        const std::string chunk = "data: " + std::string((1 << 20) - 6, 'a');
        for (int i = 0; i < 32 && Clock::now() < end; ++i) {
          p.continue_body(
              id, framed(response_body(i == 0 ? chunk : std::string(1 << 20, 'a'), false)), false);
          p.pump([&] { return p.unsent(id) == 0; });
        }
        p.pump([&] { return p.data[id].find("error") != std::string::npos; });
        const bool told = p.data[id].find("error") != std::string::npos;
        pump_until(p, end);
        return told ? "the client got an error event" : "no error event";
      },
      fds_back));

  rows.push_back(run(
      stack, victim, idle, "3. HPACK bomb: 2 connections x 1 MB/s of blocks", seconds,
      [&](Clock::time_point end) {
        // 3,000 copies of one indexed field: ~3 KB encoded, ~100 KB expanded.
        std::vector<std::pair<std::string, std::string>> bomb(3000, {"x-a", "b"});
        std::atomic<long> sent{0}, reset{0};
        std::vector<std::thread> t;
        for (int c = 0; c < 2; ++c) {
          t.emplace_back([&] {
            RawPeer p(stack.ext_proc);
            while (Clock::now() < end && !p.eof) {
              const auto t0 = Clock::now();
              p.open(kProcess, "", true, bomb);
              ++sent;
              p.pump([] { return false; }, std::chrono::milliseconds(1));
              std::this_thread::sleep_until(t0 + std::chrono::milliseconds(3));
            }
            p.pump([] { return false; }, std::chrono::milliseconds(200));
            for (const auto& [id, code] : p.closed) {
              reset += code != 0 ? 1 : 0;
            }
          });
        }
        for (auto& th : t) {
          th.join();
        }
        return fmt::format("{} blocks sent, {} streams reset", sent.load(), reset.load());
      },
      fds_back));

  rows.push_back(run(
      stack, victim, idle, "4a. 3,000 preface-only connections", seconds,
      [&](Clock::time_point end) {
        std::vector<std::unique_ptr<RawPeer>> peers;
        for (int i = 0; i < 3000; ++i) {
          peers.push_back(std::make_unique<RawPeer>(stack.ext_proc, RawPeer::Open::kPrefaceOnly));
        }
        std::this_thread::sleep_until(end);
        int closed = 0;
        for (auto& p : peers) {
          closed += p->wait_closed() ? 1 : 0;
        }
        return fmt::format("{} of 3000 closed by the handshake timeout", closed);
      },
      fds_back));

  rows.push_back(run(
      stack, victim, idle, "4b. 8 streams relaying SSE to a peer that never reads", seconds,
      [&](Clock::time_point end) {
        RawPeer p(stack.ext_proc, RawPeer::Open::kHandshake, 65535, false);
        std::vector<int32_t> ids;
        for (int i = 0; i < 8; ++i) {
          ids.push_back(picked_stream(p, true));
          p.continue_body(ids.back(), framed(response_headers()), false);
        }
        std::string event;
        while (event.size() < 60000) {
          event += R"(data: {"choices":[{"index":0,"text":"token"}]})"
                   "\n\n";
        }
        const std::string chunk = framed(response_body(event, false));
        std::size_t offered = 0;
        while (Clock::now() < end) {
          for (const int32_t id : ids) {
            if (p.unsent(id) < 256 * 1024) {
              p.continue_body(id, chunk, false);
              offered += chunk.size();
            }
          }
          p.pump([] { return false; }, std::chrono::milliseconds(5));
        }
        std::size_t unsent = 0;
        for (const int32_t id : ids) {
          unsent += p.unsent(id);
        }
        return fmt::format("{:.0f} MB got in of {:.0f} MB offered", (offered - unsent) / 1e6,
                           offered / 1e6);
      },
      fds_back));

  // Stays connected and silent (its socket open, nothing read) until the run is over.
  std::unique_ptr<RawPeer> silent;
  rows.push_back(run(
      stack, victim, idle, "5. a silent gateway holding 50 picks", seconds,
      [&](Clock::time_point end) {
        silent = std::make_unique<RawPeer>(stack.ext_proc);
        for (int i = 0; i < 50; ++i) {
          picked_stream(*silent, false);
        }
        const double held = stack.in_flight();
        const auto silent_at = Clock::now();
        while (stack.in_flight() > 1 && Clock::now() < end) {
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        const double gone_after = std::chrono::duration<double>(Clock::now() - silent_at).count();
        std::this_thread::sleep_until(end);
        return fmt::format("{:.0f} requests in flight when it went silent, {:.1f} s later {:.0f}",
                           held, gone_after, stack.in_flight());
      },
      [&] { return stack.in_flight() <= 1; }));

  rows.push_back(run(
      stack, victim, idle, "7. a message truncated by END_STREAM", seconds,
      [&](Clock::time_point end) {
        RawPeer p(stack.ext_proc);
        const int32_t id =
            p.open(kProcess, llmd::testing::grpc_prefix(0, 100) + "0123456789", true);
        p.pump([&] { return p.closed.count(id) > 0; });
        std::this_thread::sleep_until(end);
        return "grpc-status " + p.fields[id]["grpc-status"];
      },
      fds_back));
  return rows;
}

// Attack 6: descriptors run out at `ulimit -n 256`; the probes and the proxy must still answer.
Row descriptor_attack(std::chrono::seconds seconds) {
  Stack stack(256);
  Victim victim(stack);
  const Idle idle = measure_idle(stack, victim);
  const int base_fds = stack.fds();
  std::atomic<int> probes_ok{0}, probes{0};
  Row row = run(
      stack, victim, idle, "6. 400 preface-only connections at ulimit -n 256", seconds,
      [&](Clock::time_point end) {
        std::vector<std::unique_ptr<RawPeer>> peers;
        for (int i = 0; i < 400; ++i) {
          peers.push_back(std::make_unique<RawPeer>(stack.ext_proc, RawPeer::Open::kPrefaceOnly));
        }
        while (Clock::now() < end) {
          llmd::http::HttpClient c("127.0.0.1", stack.health, std::chrono::seconds(2));
          probes_ok += c.get("/healthz").status == 200 ? 1 : 0;
          ++probes;
          std::this_thread::sleep_for(std::chrono::milliseconds(200));
        }
        return fmt::format("health probes {} of {} answered", probes_ok.load(), probes.load());
      },
      [&] { return stack.fds() <= base_fds + 4; });
  return row;
}

Json to_json(const Row& r) {
  return Json{{"attack", r.attack},
              {"attacker", r.attacker},
              {"idle_p99_ms", r.idle_p99},
              {"p50_ms", r.p50},
              {"p99_ms", r.p99},
              {"proxy_failed", r.proxy_failed},
              {"picks_ok", r.picks_ok},
              {"picks_failed", r.picks_failed},
              {"peak_rss_mib", r.peak_rss},
              {"rss_after_mib", r.rss_after},
              {"peak_fds", r.peak_fds},
              {"fds_before", r.fds_before},
              {"epp_cpu_s", r.epp_cpu_s},
              {"idle_cpu_s", r.idle_cpu_s},
              {"released", r.released}};
}

std::string table(const std::vector<Row>& rows) {
  std::string out =
      "| attack | what the attacker got | victim proxy p50 / p99 ms (idle p99) | proxy failed | "
      "gateway picks ok / failed | EPP peak RSS MiB (after) | EPP fds peak (before) | "
      "EPP CPU s during (idle, same length) | released after |\n"
      "|---|---|---|---:|---:|---:|---:|---:|---|\n";
  for (const Row& r : rows) {
    out += fmt::format(
        "| {} | {} | {:.1f} / {:.1f} ({:.1f}) | {} | {} / {} | {:.0f} ({:.0f}) | "
        "{} ({}) | {:.1f} ({:.1f}) | {} |\n",
        r.attack, r.attacker, r.p50, r.p99, r.idle_p99, r.proxy_failed, r.picks_ok, r.picks_failed,
        r.peak_rss, r.rss_after, r.peak_fds, r.fds_before, r.epp_cpu_s, r.idle_cpu_s, r.released);
  }
  return out;
}

int main_impl(int argc, char** argv) {
  llmd::config::Options o("gateway_attacks", "Issue 49's attacks on the ext_proc port");
  o.add("seconds", "", "10", "How long each attack runs");
  o.add("out-dir", "", std::string(LLMD_SOURCE_DIR) + "/bench/results", "Where results go");
  if (!o.parse(argc, argv)) {
    return 0;
  }
  const auto seconds = std::chrono::seconds(o.integer("seconds", 1, 600));
  rlimit nofile{};
  ::getrlimit(RLIMIT_NOFILE, &nofile);
  nofile.rlim_cur = nofile.rlim_max;  // 3,000 attacking connections of our own
  ::setrlimit(RLIMIT_NOFILE, &nofile);
  std::vector<Row> rows = attacks(seconds);
  rows.push_back(descriptor_attack(seconds));
  const std::string t = table(rows);
  std::cout << t;
  Json json = Json::array();
  for (const Row& r : rows) {
    json.push_back(to_json(r));
  }
  const std::string out = o.str("out-dir");
  std::filesystem::create_directories(out);
  std::ofstream(out + "/gateway_attacks.json") << json.dump(2) << "\n";
  std::ofstream(out + "/gateway_attacks.md")
      << "# Issue 49's attacks on the gateway port\n\n"
         "`build/bench/gateway_attacks` (bench/gateway_attacks/gateway_attacks.cc): each attack "
         "runs for "
      << seconds.count()
      << " s against the real EPP (two modelsim pods, proxy and ext_proc ports, "
         "extProc.streamIdleTimeoutMs 5 s, every other limit at its default) while a victim sends "
         "a proxy completion every 50 ms and a gateway pick every 100 ms. *released after*: from "
         "the attack's end until the EPP's descriptors are back within 4 of where they were (the "
         "silent gateway: until its requests are no longer in flight); 0.0 s when the attack's "
         "own limit released it while it ran (the handshake timeout, the stream idle timeout: "
         "its column says when). Run on "
      << llmd::util::now_rfc3339() << ".\n\n"
      << t;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return main_impl(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "gateway_attacks: " << e.what() << "\n";
    return 1;
  }
}
