#pragma once
// One simulated vLLM pod: a SimEngine on a (scaled, freezable) clock, the requests it is
// answering, its vLLM metrics and its injected fault. Plain class without I/O or threads: the
// caller passes the current wall time (ms on any monotonic clock) into every call and runs it
// on one strand; the host (modelsim_app.cc) arms a timer for next_wakeup().
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "bench/modelsim/fault.h"
#include "bench/modelsim/openai_protocol.h"
#include "bench/modelsim/pod_metrics.h"
#include "common/http/response_stream.h"
#include "bench/modelsim/sim_clock.h"
#include "bench/sim/sim_engine.h"
#include "common/http/message.h"

namespace llmd::modelsim {

struct PodConfig {
  int index = 0;
  sim::EngineConfig engine;
  ProtocolConfig protocol;
  double time_scale = 1.0;  // simulated ms per wall ms (> 0)
};

class Pod {
 public:
  Pod(PodConfig config, double wall_ms);

  // Starts answering an inference request; returns its key for client_gone() (0 when the
  // request was answered at once: rejected, or a fault).
  uint64_t handle_inference(InferenceRequest request, const std::string& request_id,
                            http::ResponseStreamPtr stream, int64_t created_unix_s, double wall_ms);
  // The client of `key` disconnected: abort its engine request.
  void client_gone(uint64_t key, double wall_ms);

  // Delivers every engine event due by `wall_ms`, ends expired faults (running the requests
  // a stall held back).
  void advance(double wall_ms);
  // Wall time of the next advance() that has something to do (+inf: none).
  double next_wakeup() const;

  http::Response health(double wall_ms);
  http::Response metrics(double wall_ms);
  http::Response state(double wall_ms);  // JSON: engine snapshot, fault, config (debugging)

  // Faults.
  http::Response set_fault(const FaultSpec& fault, double wall_ms);
  FaultMode fault_mode(double wall_ms);  // after expiring an elapsed fault
  double slow_delay_ms(double wall_ms);  // "slow" fault's delay, else 0
  // While stalled, `fn` runs when the stall ends (in order of hold()).
  void hold(std::function<void()> fn) { held_.push_back(std::move(fn)); }

  const PodConfig& config() const { return config_; }
  const sim::SimEngine& engine() const { return engine_; }

 private:
  struct Live {
    Live(InferenceRequest r, http::ResponseStreamPtr s, ResponseFormatter f)
        : request(std::move(r)), stream(std::move(s)), format(std::move(f)) {}
    InferenceRequest request;
    http::ResponseStreamPtr stream;
    ResponseFormatter format;
    std::string text;  // non-streaming: the answer so far
    std::string out;   // streaming: chunks to write at the end of this advance()
    int64_t tokens = 0;
    int64_t close_after = 0;  // "close" fault: cut after this many chunks (0 = never)
    bool finished = false;
    bool cut = false;
  };

  void expire_fault(double wall_ms);
  void run_engine(double wall_ms);
  std::vector<http::Header> response_headers(const std::string& request_id) const;

  PodConfig config_;
  SimClock clock_;
  sim::SimEngine engine_;
  PodMetrics metrics_;
  sim::BlockHash root_;
  std::unordered_map<uint64_t, Live> live_;
  std::vector<sim::SimEvent> events_;
  std::vector<uint64_t> touched_;
  uint64_t next_key_ = 1;
  FaultSpec fault_;
  double fault_until_ = std::numeric_limits<double>::infinity();
  std::vector<std::function<void()>> held_;
};

}  // namespace llmd::modelsim
