#pragma once
// Per-request records of a load run and their summary (per stage and overall). Pure.
//
// Definitions (the same as the EPP's training feedback and vLLM's benchmark):
//   TTFT  = first content chunk - send (non-streaming: = E2E)
//   E2E   = end of response - send
//   TPOT  = (E2E - TTFT) / (completion_tokens - 1), for completion_tokens >= 2
//   NTPOT = E2E / completion_tokens
// completion_tokens comes from `usage` when present, else the number of content chunks.
// Latencies are measured on the wall clock in ms; the summary multiplies them by `time_scale`
// (and divides rates by it) so a modelsim run at --time-scale N reports simulated-GPU time.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "bench/workload/workload.h"

namespace llmd::loadclient {

struct RequestRecord {
  uint64_t index = 0;
  int stage = 0;
  uint64_t session = 0;
  int64_t turn = 0;
  double scheduled_ms = 0;     // trace arrival time, from the run start
  double sent_ms = -1;         // when the request was written
  double first_token_ms = -1;  // first content chunk
  double end_ms = -1;          // response complete (or failed)
  int status = 0;              // HTTP status; 0 = transport failure / not answered
  bool ok = false;
  std::string error;
  int64_t prompt_words = 0;  // client-side count of the prompt
  int64_t max_tokens = 0;
  int64_t prompt_tokens = -1;  // usage (-1 when absent)
  int64_t completion_tokens = -1;
  int64_t cached_tokens = -1;
  int64_t content_chunks = 0;
  std::string endpoint;  // x-gateway-destination-endpoint (EPP) or the target
  std::optional<double> slo_ttft_ms;
  std::optional<double> slo_tpot_ms;

  int64_t output_tokens() const {
    return completion_tokens >= 0 ? completion_tokens : content_chunks;
  }
  double ttft_ms() const { return first_token_ms >= 0 ? first_token_ms - sent_ms : -1; }
  double e2e_ms() const { return end_ms - sent_ms; }
  std::optional<double> tpot_ms() const;
  std::optional<double> ntpot_ms() const;
};

nlohmann::json to_json(const RequestRecord& r);

struct Percentiles {
  int64_t count = 0;
  double mean = 0, p50 = 0, p90 = 0, p95 = 0, p99 = 0, max = 0;
};
Percentiles percentiles(std::vector<double> values);  // linear interpolation between ranks

struct SummaryInfo {
  std::string target;
  std::string workload;
  uint64_t seed = 0;
  double time_scale = 1.0;
  double wall_ms = 0;
  int64_t not_sent = 0;  // trace requests never sent (caps)
  bool stopped_by_wall_cap = false;
};

// {"info":{...}, "overall":{...}, "stages":[{...}]}: per group count, success, success_rate,
// ttft/tpot/ntpot/e2e percentiles (ms), output_tokens_per_s, requests_per_s, prefix cache hit
// ratio (cached/prompt tokens from usage), SLO attainment when SLOs were set, errors by kind.
nlohmann::json summarize(const std::vector<RequestRecord>& records,
                         const std::vector<workload::Stage>& stages, const SummaryInfo& info);

// A side-by-side table of runs' overall results, one column per run (label, summary.json as
// summarize() wrote it): requests answered, TTFT p50/p95/p99 (and p95 relative to the first
// run's), TPOT p50/p99, E2E p50, output tokens per second, prefix cache hits and, when SLOs were
// sent, SLO attainment. Plain text for a terminal; a value a summary lacks shows as "-".
std::string comparison_table(const std::vector<std::pair<std::string, nlohmann::json>>& runs);

}  // namespace llmd::loadclient
