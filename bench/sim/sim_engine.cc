#include "bench/sim/sim_engine.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace llmd::sim {

namespace {

EngineConfig validated(EngineConfig config) {
  if (auto err = config.validate(); !err.empty()) {
    throw std::invalid_argument("engine config: " + err);
  }
  return config;
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

}  // namespace

SimRequest make_request(uint64_t id, const std::vector<TokenId>& prompt, BlockHash root,
                        int64_t max_output_tokens, int block_size) {
  SimRequest r;
  r.id = id;
  r.prompt_tokens = static_cast<int64_t>(prompt.size());
  r.block_hashes = block_hashes(prompt, root, block_size);
  const std::size_t hashed = r.block_hashes.size() * static_cast<std::size_t>(block_size);
  r.tail_tokens.assign(prompt.begin() + static_cast<std::ptrdiff_t>(hashed), prompt.end());
  r.max_output_tokens = max_output_tokens;
  uint64_t seed = r.block_hashes.empty() ? root : r.block_hashes.back();
  for (TokenId t : r.tail_tokens) {
    seed = hash_combine(seed, t);
  }
  r.output_seed = seed;
  return r;
}

SimEngine::SimEngine(EngineConfig config)
    : config_(validated(std::move(config))),
      pool_(config_.profile.num_gpu_blocks),
      rng_(config_.seed) {}

double SimEngine::step_time_ms(int64_t prefill_tokens, int64_t decode_seqs,
                               int64_t decode_context) const {
  const auto& p = config_.profile;
  return p.step_overhead_ms + p.prefill_ms_per_token * static_cast<double>(prefill_tokens) +
         p.decode_ms_per_seq * static_cast<double>(decode_seqs) +
         p.decode_ms_per_context_token * static_cast<double>(decode_context);
}

SubmitResult SimEngine::submit(SimRequest request) {
  const int64_t bs = config_.block_size;
  if (slot_of_.count(request.id) > 0) {
    return {false, "duplicate request id " + std::to_string(request.id)};
  }
  if (request.prompt_tokens < 1) {
    return {false, "the prompt must contain at least one token"};
  }
  if (request.max_output_tokens < 1) {
    return {false,
            "max_tokens must be at least 1, got " + std::to_string(request.max_output_tokens)};
  }
  const int64_t total = request.prompt_tokens + request.max_output_tokens;
  if (total > config_.max_model_len) {
    return {false, "This model's maximum context length is " +
                       std::to_string(config_.max_model_len) + " tokens. However, you requested " +
                       std::to_string(total) + " tokens (" + std::to_string(request.prompt_tokens) +
                       " in the messages, " + std::to_string(request.max_output_tokens) +
                       " in the completion). Please reduce the length of the messages or "
                       "completion."};
  }
  if (ceil_div(total, bs) > pool_.num_blocks()) {
    return {false, "the request needs " + std::to_string(ceil_div(total, bs)) +
                       " KV blocks but the cache has only " + std::to_string(pool_.num_blocks())};
  }
  if (static_cast<int64_t>(request.block_hashes.size()) > request.prompt_tokens / bs) {
    return {false, "more block hashes than full prompt blocks"};
  }

  const uint32_t slot = alloc_slot();
  Seq& s = slots_[slot];
  s.hashes = std::move(request.block_hashes);
  const auto covered = static_cast<int64_t>(s.hashes.size()) * bs;
  s.hashable =
      covered + static_cast<int64_t>(request.tail_tokens.size()) == request.prompt_tokens &&
      static_cast<int64_t>(request.tail_tokens.size()) < bs;
  if (s.hashable) {
    s.open_block = std::move(request.tail_tokens);
  }
  request.tail_tokens.clear();
  s.req = std::move(request);
  s.num_tokens = s.req.prompt_tokens;
  s.live = true;
  s.order = next_order_++;
  s.stats.prompt_tokens = s.req.prompt_tokens;
  s.stats.arrival_ms = now_;
  slot_of_.emplace(s.req.id, slot);
  enqueue_waiting(slot, false);
  blocked_ = false;
  return {true, {}};
}

bool SimEngine::abort(uint64_t request_id) {
  auto it = slot_of_.find(request_id);
  if (it == slot_of_.end()) {
    return false;
  }
  const uint32_t slot = it->second;
  Seq& s = slots_[slot];
  if (s.running) {
    running_.erase(std::find(running_.begin(), running_.end(), slot));
    std::erase_if(step_, [slot](const Scheduled& x) { return x.slot == slot; });
  } else {
    waiting_.erase(wait_key(slot));
  }
  free_blocks(s);
  release_slot(slot);
  ++counters_.requests_aborted;
  blocked_ = false;
  return true;
}

double SimEngine::next_event_time() const {
  if (in_step_) {
    return step_end_;
  }
  if (!blocked_ && (!waiting_.empty() || !running_.empty())) {
    return now_;
  }
  return kNever;
}

void SimEngine::advance_to(double t_ms, std::vector<SimEvent>& out) {
  if (!(t_ms >= now_)) {  // also rejects NaN
    t_ms = now_;
  }
  while (true) {
    if (in_step_) {
      if (step_end_ > t_ms) {
        break;
      }
      now_ = step_end_;
      in_step_ = false;
      finish_step(out);
      continue;
    }
    if (blocked_ || (waiting_.empty() && running_.empty())) {
      break;
    }
    if (!start_step(out)) {
      blocked_ = true;
    }
  }
  now_ = t_ms;
}

SimMetrics SimEngine::metrics() const {
  SimMetrics m = counters_;
  m.now_ms = now_;
  m.num_running = static_cast<int64_t>(running_.size());
  m.num_waiting = static_cast<int64_t>(waiting_.size());
  m.kv_usage = pool_.usage();
  m.num_gpu_blocks = pool_.num_blocks();
  m.num_free_blocks = pool_.num_free();
  m.num_cached_blocks = pool_.num_cached();
  m.num_evictions = pool_.evictions();
  int64_t pending = 0;
  for (const auto& k : waiting_) {
    const Seq& s = slots_[k.slot];
    pending += s.num_tokens - s.num_computed;
  }
  m.prefill_tokens_waiting = pending;
  return m;
}

uint32_t SimEngine::alloc_slot() {
  if (!free_slots_.empty()) {
    const uint32_t slot = free_slots_.back();
    free_slots_.pop_back();
    return slot;
  }
  slots_.emplace_back();
  return static_cast<uint32_t>(slots_.size() - 1);
}

void SimEngine::release_slot(uint32_t slot) {
  slot_of_.erase(slots_[slot].req.id);
  slots_[slot] = Seq{};
  free_slots_.push_back(slot);
}

SimEngine::WaitKey SimEngine::wait_key(uint32_t slot) const {
  const Seq& s = slots_[slot];
  const int64_t prio =
      config_.policy == SchedulingPolicy::kPriority ? static_cast<int64_t>(s.req.priority) : 0;
  return WaitKey{prio, s.order, slot};
}

void SimEngine::enqueue_waiting(uint32_t slot, bool front) {
  Seq& s = slots_[slot];
  if (front && config_.policy == SchedulingPolicy::kFcfs) {
    s.order = --front_order_;  // vLLM prepends preempted requests to the waiting queue
  }
  s.running = false;
  waiting_.insert(wait_key(slot));
}

bool SimEngine::allocate_for(Seq& s, int64_t tokens) {
  const int64_t need = ceil_div(tokens, config_.block_size) - static_cast<int64_t>(s.blocks.size());
  if (need <= 0) {
    return true;
  }
  if (need > pool_.num_free()) {
    return false;
  }
  for (int64_t i = 0; i < need; ++i) {
    s.blocks.push_back(*pool_.allocate());
  }
  return true;
}

void SimEngine::free_blocks(Seq& s) {
  // Tail blocks first, so they are evicted before the (more shareable) leading blocks.
  for (auto it = s.blocks.rbegin(); it != s.blocks.rend(); ++it) {
    pool_.release(*it);
  }
  s.blocks.clear();
  s.num_registered = 0;
}

std::size_t SimEngine::pick_victim() const {
  if (config_.policy == SchedulingPolicy::kFcfs) {
    return running_.size() - 1;
  }
  std::size_t worst = 0;
  for (std::size_t i = 1; i < running_.size(); ++i) {
    const Seq& a = slots_[running_[i]];
    const Seq& b = slots_[running_[worst]];
    if (std::pair(a.req.priority, a.order) > std::pair(b.req.priority, b.order)) {
      worst = i;
    }
  }
  return worst;
}

void SimEngine::preempt(uint32_t slot, std::vector<SimEvent>& out) {
  Seq& s = slots_[slot];
  running_.erase(std::find(running_.begin(), running_.end(), slot));
  free_blocks(s);
  s.num_computed = 0;
  s.prefilling = true;
  ++s.stats.preemptions;
  ++counters_.num_preemptions;
  enqueue_waiting(slot, true);
  SimEvent ev;
  ev.type = EventType::kPreempted;
  ev.request_id = s.req.id;
  ev.time_ms = now_;
  ev.stats = s.stats;
  out.push_back(std::move(ev));
}

bool SimEngine::start_step(std::vector<SimEvent>& out) {
  const int64_t bs = config_.block_size;
  step_.clear();
  int64_t budget = config_.max_num_batched_tokens;
  bool preempted_any = false;

  // 1. Running requests: decodes and unfinished chunked prefills, in admission order.
  std::size_t i = 0;
  while (i < running_.size() && budget > 0) {
    const uint32_t slot = running_[i];
    Seq& s = slots_[slot];
    const int64_t new_tokens = std::min(s.num_tokens - s.num_computed, budget);
    bool self_preempted = false;
    while (!allocate_for(s, s.num_computed + new_tokens)) {
      const std::size_t victim_index = pick_victim();
      const uint32_t victim = running_[victim_index];
      auto scheduled = std::find_if(step_.begin(), step_.end(),
                                    [victim](const Scheduled& x) { return x.slot == victim; });
      if (scheduled != step_.end()) {
        budget += scheduled->new_tokens;
        step_.erase(scheduled);
      }
      preempt(victim, out);
      preempted_any = true;
      if (victim == slot) {
        self_preempted = true;
        break;
      }
      if (victim_index < i) {
        --i;
      }
    }
    if (self_preempted) {
      continue;  // running_[i] is now the next request
    }
    step_.push_back({slot, new_tokens});
    budget -= new_tokens;
    ++i;
  }

  // 2. Waiting requests (not in a step that had to preempt, as vLLM does).
  while (!preempted_any && !waiting_.empty() && budget > 0 &&
         static_cast<int64_t>(running_.size()) < config_.max_num_seqs) {
    const WaitKey key = *waiting_.begin();
    Seq& s = slots_[key.slot];
    // Prefix-cache lookup; at least one token is always computed to produce a logit.
    const int64_t max_hit = (s.num_tokens - 1) / bs;
    const int64_t hits = pool_.cached_prefix(s.hashes, max_hit);
    const int64_t computed = hits * bs;
    const int64_t new_tokens = std::min(s.num_tokens - computed, budget);
    const int64_t to_allocate = ceil_div(computed + new_tokens, bs) - hits;
    int64_t evictable_hits = 0;
    std::vector<BlockId> hit_blocks;
    hit_blocks.reserve(static_cast<std::size_t>(hits));
    for (int64_t k = 0; k < hits; ++k) {
      const BlockId id = *pool_.lookup(s.hashes[static_cast<std::size_t>(k)]);
      evictable_hits += pool_.ref_count(id) == 0 ? 1 : 0;
      hit_blocks.push_back(id);
    }
    if (to_allocate > pool_.num_free() - evictable_hits) {
      break;  // head-of-line: the request waits for blocks
    }
    for (BlockId id : hit_blocks) {
      pool_.touch(id);
      s.blocks.push_back(id);
    }
    s.num_registered = hits;
    for (int64_t k = 0; k < to_allocate; ++k) {
      s.blocks.push_back(*pool_.allocate());
    }
    s.num_computed = computed;
    s.prefilling = true;
    counters_.prefix_cache_queries += s.num_tokens;
    counters_.prefix_cache_hits += computed;
    if (s.stats.first_scheduled_ms < 0) {
      s.stats.first_scheduled_ms = now_;
      s.stats.cached_tokens = computed;
      counters_.prompt_tokens += s.req.prompt_tokens;
    }
    waiting_.erase(waiting_.begin());
    s.running = true;
    running_.push_back(key.slot);
    step_.push_back({key.slot, new_tokens});
    budget -= new_tokens;
  }

  if (step_.empty()) {
    return false;
  }
  int64_t prefill = 0;
  int64_t decode_seqs = 0;
  int64_t decode_ctx = 0;
  for (const auto& x : step_) {
    const Seq& s = slots_[x.slot];
    if (s.prefilling) {
      prefill += x.new_tokens;
    } else {
      ++decode_seqs;
      decode_ctx += s.num_computed + x.new_tokens;
    }
  }
  double dt = step_time_ms(prefill, decode_seqs, decode_ctx);
  if (config_.profile.jitter_sigma > 0) {
    dt *= std::exp(config_.profile.jitter_sigma * jitter_(rng_));
  }
  step_end_ = now_ + dt;
  in_step_ = true;
  ++counters_.steps;
  return true;
}

void SimEngine::register_blocks(Seq& s) {
  const int64_t limit =
      std::min({static_cast<int64_t>(s.hashes.size()), s.num_computed / config_.block_size,
                static_cast<int64_t>(s.blocks.size())});
  for (; s.num_registered < limit; ++s.num_registered) {
    const auto k = static_cast<std::size_t>(s.num_registered);
    pool_.cache(s.blocks[k], s.hashes[k]);
  }
}

void SimEngine::append_token(Seq& s, TokenId t) {
  if (!s.hashable) {
    return;
  }
  s.open_block.push_back(t);
  if (static_cast<int64_t>(s.open_block.size()) == config_.block_size) {
    const BlockHash parent = s.hashes.empty() ? root_hash(config_.model_name) : s.hashes.back();
    s.hashes.push_back(block_hash(parent, s.open_block));
    s.open_block.clear();
  }
}

void SimEngine::finish_step(std::vector<SimEvent>& out) {
  bool any_finished = false;
  for (const auto& x : step_) {
    Seq& s = slots_[x.slot];
    s.num_computed += x.new_tokens;
    register_blocks(s);
    if (s.num_computed < s.num_tokens) {
      continue;  // a prefill chunk: no token yet
    }
    const int64_t k = s.stats.output_tokens;
    const uint32_t word = output_word_index(s.req.output_seed, k);
    ++s.stats.output_tokens;
    ++s.num_tokens;
    append_token(s, vocab_token(word));
    ++counters_.generation_tokens;
    s.prefilling = false;
    if (k == 0) {
      s.stats.first_token_ms = now_;
    }
    SimEvent ev;
    ev.type = k == 0 ? EventType::kFirstToken : EventType::kToken;
    ev.request_id = s.req.id;
    ev.time_ms = now_;
    ev.token_index = k;
    ev.word = word;
    out.push_back(ev);
    if (s.stats.output_tokens >= s.req.max_output_tokens) {
      s.stats.finished_ms = now_;
      SimEvent done;
      done.type = EventType::kFinished;
      done.request_id = s.req.id;
      done.time_ms = now_;
      done.stats = s.stats;
      out.push_back(std::move(done));
      s.live = false;
      any_finished = true;
      ++counters_.requests_finished;
    }
  }
  if (any_finished) {
    std::vector<uint32_t> done;
    std::erase_if(running_, [&](uint32_t slot) {
      if (slots_[slot].live) {
        return false;
      }
      done.push_back(slot);
      return true;
    });
    for (uint32_t slot : done) {
      free_blocks(slots_[slot]);
      release_slot(slot);
    }
  }
  step_.clear();
}

}  // namespace llmd::sim
