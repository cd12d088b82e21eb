#pragma once
// SimEngine: one simulated vLLM server (continuous batching, chunked prefill, prefix caching,
// preemption by recompute, FCFS or priority scheduling) on an explicit clock.
//
// No threads, no I/O, no wall clock: the caller owns time. Times are milliseconds (double) on
// the caller's clock, which only moves forward. Typical driver loop:
//
//   engine.advance_to(now, events);        // deliver what happened up to `now`
//   engine.submit(request);                // arrives at engine.now()
//   next = engine.next_event_time();       // sleep (real or virtual) until then, repeat
//
// The engine runs one forward pass ("step") at a time. A step is scheduled when the previous
// one ends (or when work arrives while idle) from the state at that instant, takes the
// GpuProfile's step time, and its tokens appear at its end. Deterministic for a given config
// (the jitter RNG is seeded) and sequence of calls. Copyable: a copy is an independent engine
// with the same state (the cluster benchmark's oracle can probe a copy).
// Not thread-safe: owned by one thread or strand.
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "bench/sim/block_pool.h"
#include "bench/sim/profile.h"
#include "bench/sim/tokens.h"

namespace llmd::sim {

struct SimRequest {
  uint64_t id = 0;            // caller-chosen, unique among live requests
  int64_t prompt_tokens = 0;  // >= 1
  // Chained hashes of the prompt's leading full blocks (see tokens.h); may cover fewer blocks
  // than the prompt has (the rest is not cacheable), or none (no prefix caching).
  std::vector<BlockHash> block_hashes;
  // Prompt tokens after the last hashed block. Given when block_hashes covers every full block,
  // it lets blocks filled with generated tokens be hashed and cached too (multi-turn reuse).
  std::vector<TokenId> tail_tokens;
  int64_t max_output_tokens = 1;  // >= 1; the request always generates exactly this many
  int priority = 0;               // vLLM polarity: lower is served first (priority policy)
  uint64_t output_seed = 0;       // picks the synthetic output words
};

// Builds a request from prompt token ids (hashes every full block, keeps the tail).
SimRequest make_request(uint64_t id, const std::vector<TokenId>& prompt, BlockHash root,
                        int64_t max_output_tokens, int block_size = kDefaultBlockSize);

struct RequestStats {
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;  // prefix-cache hit tokens when first scheduled
  int64_t output_tokens = 0;
  int64_t preemptions = 0;
  double arrival_ms = 0;
  double first_scheduled_ms = -1;
  double first_token_ms = -1;
  double finished_ms = -1;

  double queue_ms() const { return first_scheduled_ms - arrival_ms; }
  double ttft_ms() const { return first_token_ms - arrival_ms; }
  double e2e_ms() const { return finished_ms - arrival_ms; }
  // Mean gap between tokens after the first (0 for a single-token output).
  double tpot_ms() const {
    return output_tokens > 1 ? (finished_ms - first_token_ms) / double(output_tokens - 1) : 0.0;
  }
};

enum class EventType {
  kFirstToken,  // output token 0 (also carries token_index/word)
  kToken,       // output token k >= 1
  kFinished,    // after the last token; `stats` is complete
  kPreempted,   // the request lost its KV blocks and went back to the waiting queue
};

struct SimEvent {
  EventType type = EventType::kToken;
  uint64_t request_id = 0;
  double time_ms = 0;
  int64_t token_index = -1;  // token events
  uint32_t word = 0;         // token events: index into the output vocabulary (tokens.h)
  RequestStats stats;        // kFinished (and a snapshot for kPreempted)
};

struct SimMetrics {
  double now_ms = 0;
  int64_t num_running = 0;
  int64_t num_waiting = 0;
  double kv_usage = 0;  // 0..1
  int64_t num_gpu_blocks = 0;
  int64_t num_free_blocks = 0;
  int64_t num_cached_blocks = 0;
  int64_t prefix_cache_queries = 0;    // prompt tokens looked up (counter)
  int64_t prefix_cache_hits = 0;       // of which found cached (counter)
  int64_t num_preemptions = 0;         // counter
  int64_t num_evictions = 0;           // cached blocks evicted (counter)
  int64_t prompt_tokens = 0;           // prompt tokens computed, incl. recompute (counter)
  int64_t generation_tokens = 0;       // counter
  int64_t requests_finished = 0;       // counter
  int64_t requests_aborted = 0;        // counter
  int64_t steps = 0;                   // forward passes run (counter)
  int64_t prefill_tokens_waiting = 0;  // uncomputed tokens of waiting requests
};

struct SubmitResult {
  bool accepted = false;
  std::string error;  // why not, when rejected (vLLM would answer 400)
};

class SimEngine {
 public:
  explicit SimEngine(EngineConfig config);  // throws std::invalid_argument on a bad config

  // Queues a request arriving at now(). Rejects duplicates, empty prompts, prompts longer than
  // max_model_len and requests that could never fit in the KV cache.
  SubmitResult submit(SimRequest request);
  // Drops a live request (client gone); its blocks are released. False if unknown.
  bool abort(uint64_t request_id);

  // Time of the next thing the engine will do on its own (end of the running step, or now()
  // when idle with schedulable work); +infinity when there is nothing to do until a submit.
  double next_event_time() const;
  // Runs every step that ends at or before `t_ms` and moves now() to `t_ms` (never backwards).
  // Events are appended to `out` in time order.
  void advance_to(double t_ms, std::vector<SimEvent>& out);
  std::vector<SimEvent> advance_to(double t_ms) {
    std::vector<SimEvent> out;
    advance_to(t_ms, out);
    return out;
  }

  double now() const { return now_; }
  bool idle() const { return running_.empty() && waiting_.empty(); }
  bool has_request(uint64_t id) const { return slot_of_.count(id) > 0; }
  SimMetrics metrics() const;
  const EngineConfig& config() const { return config_; }
  const BlockPool& block_pool() const { return pool_; }
  // Step time of a batch with these totals, without jitter (the profile's formula).
  double step_time_ms(int64_t prefill_tokens, int64_t decode_seqs, int64_t decode_context) const;

 private:
  struct Seq {
    SimRequest req;
    std::vector<BlockHash> hashes;    // known full-block hashes (prompt, then generated)
    std::vector<TokenId> open_block;  // tokens after the last hashed block (when hashable)
    bool hashable = false;
    std::vector<BlockId> blocks;
    int64_t num_tokens = 0;      // prompt + generated
    int64_t num_computed = 0;    // tokens with KV computed
    int64_t num_registered = 0;  // leading blocks whose hash was given to the pool
    bool prefilling = true;
    bool running = false;
    bool live = false;
    int64_t order = 0;  // arrival order (FCFS / priority tie-break)
    RequestStats stats;
  };
  struct WaitKey {
    int64_t priority;
    int64_t order;
    uint32_t slot;
    bool operator<(const WaitKey& o) const {
      if (priority != o.priority) return priority < o.priority;
      if (order != o.order) return order < o.order;
      return slot < o.slot;
    }
  };
  struct Scheduled {
    uint32_t slot;
    int64_t new_tokens;
  };

  uint32_t alloc_slot();
  WaitKey wait_key(uint32_t slot) const;
  void enqueue_waiting(uint32_t slot, bool front);
  // Grows the seq's block list to cover `tokens`; false (nothing allocated) if not enough.
  bool allocate_for(Seq& s, int64_t tokens);
  void free_blocks(Seq& s);
  void preempt(uint32_t slot, std::vector<SimEvent>& out);
  // Picks the running request to preempt (FCFS: latest admitted; priority: worst key).
  std::size_t pick_victim() const;
  bool start_step(std::vector<SimEvent>& out);
  void finish_step(std::vector<SimEvent>& out);
  void register_blocks(Seq& s);
  void append_token(Seq& s, TokenId t);
  void release_slot(uint32_t slot);

  EngineConfig config_;
  BlockPool pool_;
  std::mt19937_64 rng_;
  std::normal_distribution<double> jitter_{0.0, 1.0};

  std::vector<Seq> slots_;
  std::vector<uint32_t> free_slots_;
  std::unordered_map<uint64_t, uint32_t> slot_of_;
  std::vector<uint32_t> running_;  // admission order
  std::set<WaitKey> waiting_;
  int64_t next_order_ = 0;
  int64_t front_order_ = 0;

  double now_ = 0;
  bool in_step_ = false;
  bool blocked_ = false;  // idle with waiting work that cannot be scheduled until something changes
  double step_end_ = 0;
  std::vector<Scheduled> step_;

  SimMetrics counters_;
};

inline constexpr double kNever = std::numeric_limits<double>::infinity();

}  // namespace llmd::sim
