#pragma once
// modelsim: many simulated vLLM pods in one process, one port each (base_port + i), sharing one
// io_context. Each pod's engine lives on its own strand and is driven in real time (scaled by
// time_scale) by a timer armed for the engine's next event. HTTP surface per pod:
//   POST /v1/completions, /v1/chat/completions (stream true/false)   GET /v1/models, /version
//   GET /health   GET /metrics (vLLM names)   POST|GET /admin/fault   GET /admin/state
// Not copyable; construct (binds every port, throws on failure), then run() until stop()/signal.
#include <cstdint>
#include <memory>
#include <string>

#include "bench/modelsim/openai_protocol.h"
#include "common/http/stream_server.h"
#include "bench/sim/profile.h"

namespace llmd::modelsim {

struct ModelSimConfig {
  int pods = 1;               // [1, 1024]
  uint16_t base_port = 9100;  // pod i listens on base_port + i (0: any free ports)
  int slow_pods = 0;          // the last `slow_pods` pods use `slow_profile`
  sim::EngineConfig engine;   // pod i gets engine.seed + i
  sim::GpuProfile slow_profile = sim::slow_profile();
  double time_scale = 1.0;  // 10 = ten times faster than real time
  ProtocolConfig protocol;
  http::StreamServerOptions server;
  // Like vLLM's --api-key: /v1/* requests without "Authorization: Bearer <key>" get 401.
  std::string api_key;
};

class ModelSim {
 public:
  explicit ModelSim(ModelSimConfig config);
  ~ModelSim();
  ModelSim(const ModelSim&) = delete;
  ModelSim& operator=(const ModelSim&) = delete;

  uint16_t port(int pod) const;
  int pods() const;
  void run(bool handle_signals = true);  // blocks
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace llmd::modelsim
