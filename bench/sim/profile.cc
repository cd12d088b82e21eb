#include "bench/sim/profile.h"

#include <cmath>
#include <sstream>

namespace llmd::sim {

namespace {

template <typename T>
std::string bad(std::string_view field, std::string_view problem, T value) {
  std::ostringstream os;
  os << field << ": " << problem << " (got " << value << ")";
  return os.str();
}

}  // namespace

GpuProfile h100_profile() {
  return GpuProfile{};
}

GpuProfile slow_profile() {
  GpuProfile p;
  p.name = "slow";
  p.step_overhead_ms = 8.0;
  p.prefill_ms_per_token = 0.040;
  p.decode_ms_per_seq = 0.006;
  p.decode_ms_per_context_token = 0.00018;
  p.num_gpu_blocks = 16000;
  return p;
}

GpuProfile mid_profile() {
  GpuProfile p;
  p.name = "mid";
  p.step_overhead_ms = 6.5;
  p.prefill_ms_per_token = 0.026;
  p.decode_ms_per_seq = 0.0045;
  p.decode_ms_per_context_token = 0.00012;
  p.num_gpu_blocks = 24000;
  return p;
}

std::optional<GpuProfile> profile_by_name(std::string_view name) {
  if (name == "h100") {
    return h100_profile();
  }
  if (name == "mid" || name == "l40s") {
    return mid_profile();
  }
  if (name == "slow" || name == "a100") {
    return slow_profile();
  }
  return std::nullopt;
}

std::optional<SchedulingPolicy> parse_policy(std::string_view name) {
  if (name == "fcfs") {
    return SchedulingPolicy::kFcfs;
  }
  if (name == "priority") {
    return SchedulingPolicy::kPriority;
  }
  return std::nullopt;
}

std::string_view policy_name(SchedulingPolicy p) {
  return p == SchedulingPolicy::kPriority ? "priority" : "fcfs";
}

std::string EngineConfig::validate() const {
  const auto& p = profile;
  if (!(p.step_overhead_ms > 0) || !std::isfinite(p.step_overhead_ms)) {
    return bad("step_overhead_ms", "must be > 0", p.step_overhead_ms);
  }
  if (!(p.prefill_ms_per_token >= 0) || !std::isfinite(p.prefill_ms_per_token)) {
    return bad("prefill_ms_per_token", "must be >= 0", p.prefill_ms_per_token);
  }
  if (!(p.decode_ms_per_seq >= 0) || !std::isfinite(p.decode_ms_per_seq)) {
    return bad("decode_ms_per_seq", "must be >= 0", p.decode_ms_per_seq);
  }
  if (!(p.decode_ms_per_context_token >= 0) || !std::isfinite(p.decode_ms_per_context_token)) {
    return bad("decode_ms_per_context_token", "must be >= 0", p.decode_ms_per_context_token);
  }
  if (!(p.jitter_sigma >= 0 && p.jitter_sigma <= 1)) {
    return bad("jitter_sigma", "must be in [0, 1]", p.jitter_sigma);
  }
  if (p.num_gpu_blocks < 1) {
    return bad("num_gpu_blocks", "must be >= 1", p.num_gpu_blocks);
  }
  if (block_size < 1 || block_size > 1024) {
    return bad("block_size", "must be in [1, 1024]", block_size);
  }
  if (max_num_seqs < 1 || max_num_seqs > 65536) {
    return bad("max_num_seqs", "must be in [1, 65536]", max_num_seqs);
  }
  if (max_num_batched_tokens < 1 || max_num_batched_tokens > (int64_t{1} << 24)) {
    return bad("max_num_batched_tokens", "must be in [1, 16777216]", max_num_batched_tokens);
  }
  if (max_model_len < 2 || max_model_len > (int64_t{1} << 24)) {
    return bad("max_model_len", "must be in [2, 16777216]", max_model_len);
  }
  return {};
}

}  // namespace llmd::sim
