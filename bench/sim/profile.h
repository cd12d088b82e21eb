#pragma once
// Configuration of one simulated vLLM server: the GPU profile (step-time model) and the engine
// limits. Plain values; `validate()` returns an error naming the field and the bad value.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace llmd::sim {

// Step-time model of one forward pass over the batch (simulator.md section 2):
//   step_ms = step_overhead_ms + prefill_ms_per_token x prefill_tokens_this_step
//           + decode_ms_per_seq x decode_seqs + decode_ms_per_context_token x decode_context
// times a lognormal jitter factor exp(N(0, jitter_sigma)).
struct GpuProfile {
  std::string name = "h100";
  double step_overhead_ms = 5.0;                 // fixed cost of a forward pass (> 0)
  double prefill_ms_per_token = 0.018;           // compute per prompt token (>= 0)
  double decode_ms_per_seq = 0.003;              // per decoding sequence (>= 0)
  double decode_ms_per_context_token = 0.00008;  // KV reads per context token (>= 0)
  double jitter_sigma = 0.03;                    // lognormal sigma; 0 = deterministic [0, 1]
  int64_t num_gpu_blocks = 32000;                // KV capacity in blocks (>= 1)
};

// An 8B model on one H100 80GB (the default; constants from public H100 fits, see
// bench/sim/CALIBRATION.md).
GpuProfile h100_profile();
// A slower GPU class (A100-40GB-like: ~2x slower compute and bandwidth, half the KV blocks)
// for heterogeneous pools.
GpuProfile slow_profile();
// Between the two (L40S-like: ~1.4x slower than h100, 3/4 of its KV blocks): a second slow
// class, so that a pool can mix three speeds.
GpuProfile mid_profile();
// "h100", "mid" (also "l40s") or "slow" (also "a100"); nullopt for anything else.
std::optional<GpuProfile> profile_by_name(std::string_view name);

enum class SchedulingPolicy { kFcfs, kPriority };
std::optional<SchedulingPolicy> parse_policy(std::string_view name);  // "fcfs" | "priority"
std::string_view policy_name(SchedulingPolicy p);

struct EngineConfig {
  GpuProfile profile = h100_profile();
  int block_size = 16;                    // tokens per KV block [1, 1024]
  int max_num_seqs = 256;                 // running sequences per step [1, 65536]
  int64_t max_num_batched_tokens = 2048;  // token budget per step (chunked prefill) [1, 1<<24]
  int64_t max_model_len = 131072 + 8192;  // prompt + output limit per request [2, 1<<24]
  SchedulingPolicy policy = SchedulingPolicy::kFcfs;
  uint64_t seed = 1;                                            // jitter RNG seed
  std::string model_name = "meta-llama/Llama-3.1-8B-Instruct";  // seeds the block-hash chain

  // Empty string when valid, else "<field>: <problem> (got <value>)".
  std::string validate() const;
};

}  // namespace llmd::sim
