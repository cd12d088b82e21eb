// modelsim executable: flags -> ModelSimConfig -> ModelSim::run(). Logic lives in llmd_modelsim.
#include <cstdio>
#include <iostream>

#include <spdlog/spdlog.h>

#include "bench/modelsim/modelsim_app.h"
#include "common/config/logging.h"
#include "common/config/options.h"

using namespace llmd;

namespace {

void add_options(config::Options& o) {
  o.add("pods", "MODELSIM_PODS", "1", "Number of simulated pods (one port each)");
  o.add("base-port", "MODELSIM_BASE_PORT", "9100", "Pod i listens on base-port + i");
  o.add("host", "MODELSIM_HOST", "127.0.0.1", "Address to listen on");
  o.add("profile", "MODELSIM_PROFILE", "h100", "GPU profile of the pods: h100 | slow");
  o.add("slow-pods", "MODELSIM_SLOW_PODS", "0", "The last K pods use the slow profile");
  o.add("time-scale", "MODELSIM_TIME_SCALE", "1",
        "Simulated time per wall time (10 = ten times faster than real time)");
  o.add("scheduling-policy", "MODELSIM_SCHEDULING_POLICY", "fcfs", "fcfs | priority");
  o.add("num-gpu-blocks", "MODELSIM_NUM_GPU_BLOCKS", "0",
        "KV cache blocks per pod (0 = the profile's: h100 32000, slow 16000)");
  o.add("block-size", "MODELSIM_BLOCK_SIZE", "16", "Tokens per KV block");
  o.add("max-num-seqs", "MODELSIM_MAX_NUM_SEQS", "256", "Running sequences per step");
  o.add("max-num-batched-tokens", "MODELSIM_MAX_NUM_BATCHED_TOKENS", "2048",
        "Token budget per step (chunked prefill)");
  o.add("max-model-len", "MODELSIM_MAX_MODEL_LEN", "139264", "Prompt + output limit");
  o.add("jitter", "MODELSIM_JITTER", "0.03", "Lognormal sigma of the step time (0 = none)");
  o.add("seed", "MODELSIM_SEED", "1", "Jitter seed (pod i uses seed + i)");
  o.add("model-name", "MODELSIM_MODEL_NAME", "meta-llama/Llama-3.1-8B-Instruct",
        "Served model name (also seeds the prefix-cache hash chain)");
  o.add("default-max-tokens", "MODELSIM_DEFAULT_MAX_TOKENS", "256",
        "Output length when a request gives no max_tokens");
  o.add("io-threads", "MODELSIM_IO_THREADS", "1", "HTTP io threads for all pods");
  o.add("max-body-bytes", "MODELSIM_MAX_BODY_BYTES", "33554432", "Largest accepted request body");
  o.add("header-timeout-ms", "MODELSIM_HEADER_TIMEOUT_MS", "10000", "Time allowed for headers");
  o.add("idle-timeout-ms", "MODELSIM_IDLE_TIMEOUT_MS", "30000", "Keep-alive idle timeout");
  o.add("write-timeout-ms", "MODELSIM_WRITE_TIMEOUT_MS", "30000",
        "Connection dropped when the client does not read for this long");
  o.add("max-connections", "MODELSIM_MAX_CONNECTIONS", "8192", "Open connections, all pods");
  o.add("api-key", "MODELSIM_API_KEY", "",
        "Require 'Authorization: Bearer <key>' on /v1/* (vLLM's --api-key)");
  o.add("log-level", "LOG_LEVEL", "info", "trace | debug | info | warn | error");
}

int run(int argc, char** argv) {
  config::Options o("modelsim", "Simulated vLLM model-server pool (OpenAI API, vLLM metrics)");
  add_options(o);
  if (!o.parse(argc, argv)) {
    return 0;
  }
  config::init_logging(o.str("log-level"), "modelsim");
  modelsim::ModelSimConfig cfg;
  cfg.pods = static_cast<int>(o.integer("pods", 1, 1024));
  cfg.base_port = static_cast<uint16_t>(o.integer("base-port", 0, 65535));
  if (cfg.base_port != 0 && cfg.base_port + cfg.pods - 1 > 65535) {
    throw std::invalid_argument("--base-port + --pods exceeds 65535");
  }
  cfg.slow_pods = static_cast<int>(o.integer("slow-pods", 0, cfg.pods));
  auto profile = sim::profile_by_name(o.str("profile"));
  if (!profile) {
    throw std::invalid_argument("--profile: expected h100 or slow, got '" + o.str("profile") + "'");
  }
  auto policy = sim::parse_policy(o.str("scheduling-policy"));
  if (!policy) {
    throw std::invalid_argument("--scheduling-policy: expected fcfs or priority, got '" +
                                o.str("scheduling-policy") + "'");
  }
  cfg.engine.profile = *profile;
  cfg.engine.profile.jitter_sigma = o.number("jitter", 0, 1);
  cfg.slow_profile.jitter_sigma = cfg.engine.profile.jitter_sigma;
  if (const auto blocks = o.integer("num-gpu-blocks", 0, 100'000'000); blocks > 0) {
    cfg.engine.profile.num_gpu_blocks = blocks;
    cfg.slow_profile.num_gpu_blocks = blocks;
  }
  cfg.engine.block_size = static_cast<int>(o.integer("block-size", 1, 1024));
  cfg.engine.max_num_seqs = static_cast<int>(o.integer("max-num-seqs", 1, 65536));
  cfg.engine.max_num_batched_tokens = o.integer("max-num-batched-tokens", 1, 1 << 24);
  cfg.engine.max_model_len = o.integer("max-model-len", 2, 1 << 24);
  cfg.engine.policy = *policy;
  cfg.engine.seed = static_cast<uint64_t>(o.integer("seed", 0));
  cfg.engine.model_name = o.str("model-name");
  if (auto err = cfg.engine.validate(); !err.empty()) {
    throw std::invalid_argument("engine: " + err);
  }
  cfg.time_scale = o.number("time-scale", 1e-3, 1e4);
  cfg.protocol.model_name = cfg.engine.model_name;
  cfg.protocol.default_max_tokens = o.integer("default-max-tokens", 1, 1 << 24);
  cfg.api_key = o.str("api-key");
  cfg.server.host = o.str("host");
  cfg.server.io_threads = static_cast<int>(o.integer("io-threads", 1, 64));
  cfg.server.body_limit = static_cast<std::size_t>(o.integer("max-body-bytes", 1024));
  cfg.server.header_timeout = std::chrono::milliseconds(o.integer("header-timeout-ms", 100));
  cfg.server.idle_timeout = std::chrono::milliseconds(o.integer("idle-timeout-ms", 100));
  cfg.server.write_timeout = std::chrono::milliseconds(o.integer("write-timeout-ms", 100));
  cfg.server.max_connections = static_cast<std::size_t>(o.integer("max-connections", 1));

  modelsim::ModelSim sim(cfg);
  spdlog::info("modelsim: {} pod(s) ({} slow) on {}:{}-{}, profile {}, time scale {}, policy {}",
               sim.pods(), cfg.slow_pods, cfg.server.host, sim.port(0), sim.port(sim.pods() - 1),
               profile->name, cfg.time_scale, sim::policy_name(cfg.engine.policy));
  sim.run();
  spdlog::info("modelsim: stopped");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "modelsim: %s\n", e.what());
    return 2;
  }
}
