#pragma once
// Open-loop load for bench/epp_overhead: one pacing thread starts request i at start + i/rate
// whatever the earlier requests are doing (a closed loop would slow down with the EPP and hide
// its queueing), and a capacity search over such steps. The transport is a callback (proxy
// over HTTP, ext_proc over gRPC); each one reports its own added latency.
#include <sys/types.h>

#include <algorithm>
#include <cmath>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bench/common/bench_stats.h"

namespace llmd::bench {

// Called once per request, from any thread: ok and the added latency in ms.
using LoadDone = std::function<void(bool ok, double latency_ms)>;
// Starts request i asynchronously; returns at once.
using LoadStart = std::function<void(uint64_t i, LoadDone done)>;

struct StepPlan {
  double rate = 1000;     // requests/s
  double duration_s = 5;  // scheduling window
  double warmup_s = 0.3;  // requests scheduled before this are sent but not counted
  uint64_t max_requests = 200000;
  int max_in_flight = 1000;               // beyond: the request is not sent (counted as shed)
  std::chrono::milliseconds drain{3000};  // wait for stragglers after the window
};

struct StepResult {
  std::vector<double> latency_ms;  // counted requests that succeeded
  uint64_t sent = 0;  // every request started, warm-up included (the CPU is spent on all)
  uint64_t planned = 0, ok = 0, errors = 0, shed = 0, unfinished = 0;
  double window_s = 0;
  double late_p99_ms = 0;  // how far behind schedule the pacer started requests
  double achieved_rps() const { return window_s > 0 ? static_cast<double>(ok) / window_s : 0; }
};

inline StepResult run_step(const StepPlan& plan, const LoadStart& start_request) {
  using Clock = std::chrono::steady_clock;
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    int in_flight = 0;
    StepResult r;
  };
  auto s = std::make_shared<Shared>();  // late callbacks (after the drain) must not dangle
  const uint64_t n =
      std::min<uint64_t>(plan.max_requests, static_cast<uint64_t>(plan.rate * plan.duration_s));
  const uint64_t warm = static_cast<uint64_t>(plan.rate * plan.warmup_s);
  std::vector<double> late;
  late.reserve(n);
  const auto t0 = Clock::now() + std::chrono::milliseconds(20);
  for (uint64_t i = 0; i < n; ++i) {
    const auto at = t0 + std::chrono::duration_cast<Clock::duration>(
                             std::chrono::duration<double>(static_cast<double>(i) / plan.rate));
    auto now = Clock::now();
    // Sleeps shorter than ~50 us cost more than they are worth at 10k+ req/s.
    if (at - now > std::chrono::microseconds(50)) {
      std::this_thread::sleep_until(at);
      now = Clock::now();
    }
    const bool counted = i >= warm;
    {
      std::lock_guard lock(s->mu);
      if (counted) {
        ++s->r.planned;
      }
      if (s->in_flight >= plan.max_in_flight) {
        s->r.shed += counted ? 1 : 0;
        continue;
      }
      ++s->in_flight;
      ++s->r.sent;
    }
    if (counted) {
      late.push_back(std::max(0.0, std::chrono::duration<double, std::milli>(now - at).count()));
    }
    start_request(i, [s, counted](bool ok, double ms) {
      std::lock_guard lock(s->mu);
      --s->in_flight;
      if (counted) {
        if (ok) {
          ++s->r.ok;
          s->r.latency_ms.push_back(ms);
        } else {
          ++s->r.errors;
        }
      }
      s->cv.notify_all();
    });
  }
  std::unique_lock lock(s->mu);
  s->cv.wait_for(lock, plan.drain, [&] { return s->in_flight == 0; });
  StepResult r = s->r;
  r.unfinished = static_cast<uint64_t>(s->in_flight);
  r.window_s = static_cast<double>(n - std::min(n, warm)) / plan.rate;
  r.late_p99_ms = percentile(std::move(late), 0.99);
  return r;
}

// CPU seconds of the threads of this process whose name starts with `prefix` (threads inherit
// their creator's name, so the fake pods' server threads all carry the pod thread's name).
// schedstat's run time in ns: per-thread utime/stime come from tick sampling and, for many
// threads that each run briefly, read far below what they used.
inline double threads_cpu_seconds(const std::string& prefix) {
  double total = 0;
  std::error_code ec;
  for (std::filesystem::directory_iterator it("/proc/self/task", ec), end; !ec && it != end;
       it.increment(ec)) {
    std::ifstream comm(it->path() / "comm");
    std::string name;
    std::getline(comm, name);
    double ns = 0;
    if (name.rfind(prefix, 0) == 0 && std::ifstream(it->path() / "schedstat") >> ns) {
      total += ns / 1e9;
    }
  }
  return total;
}

// Who used the cores during a step: the EPP, the predictors, the fake pods (threads of this
// process) and the load generator (the rest of this process).
struct CpuSample {
  double epp = 0, predictors = 0, pods = 0, client = 0, machine = 0;
  static CpuSample take(pid_t epp_pid, const std::vector<pid_t>& predictor_pids,
                        const std::string& pod_thread_prefix) {
    CpuSample c;
    c.epp = process_cpu_seconds("/proc/" + std::to_string(epp_pid) + "/stat");
    for (pid_t p : predictor_pids) {
      c.predictors += process_cpu_seconds("/proc/" + std::to_string(p) + "/stat");
    }
    c.pods = threads_cpu_seconds(pod_thread_prefix);
    c.client = process_cpu_seconds("/proc/self/stat") - c.pods;
    c.machine = machine_busy_cpu_seconds();
    return c;
  }
  CpuSample operator-(const CpuSample& o) const {
    return {epp - o.epp, predictors - o.predictors, pods - o.pods, client - o.client,
            machine - o.machine};
  }
};

// The highest rate at which `passes(rate)` holds: doubling from `from` (up to `max_rate`) while
// steps pass, then `bisections` halvings of the gap between the last pass and the first
// failure, to multiples of `granularity`. 0 when even the lowest rate tried fails. Each call of
// `passes` is one bounded step, so the search costs at most log2(max/from) + 1 + bisections.
template <class Passes>
double capacity_search(double from, double max_rate, int bisections, double granularity,
                       Passes&& passes) {
  double lo = 0, hi = 0;
  for (double r = from; r <= max_rate; r *= 2) {
    if (!passes(r)) {
      hi = r;
      break;
    }
    lo = r;
  }
  if (hi == 0) {
    return lo;  // capped by max_rate: the true capacity may be higher
  }
  for (int k = 0; k < bisections; ++k) {
    const double mid = std::round((lo + hi) / 2 / granularity) * granularity;
    if (mid <= lo || mid >= hi) {
      break;
    }
    (passes(mid) ? lo : hi) = mid;
  }
  return lo;
}

}  // namespace llmd::bench
