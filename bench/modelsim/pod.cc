#include "bench/modelsim/pod.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "common/metrics/exposition.h"

namespace llmd::modelsim {

namespace {

using Json = nlohmann::json;
constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace

Pod::Pod(PodConfig config, double wall_ms)
    : config_(std::move(config)),
      clock_(config_.time_scale, wall_ms),
      engine_(config_.engine),
      metrics_(config_.protocol.model_name, config_.engine),
      root_(sim::root_hash(config_.engine.model_name)) {}

std::vector<http::Header> Pod::response_headers(const std::string& request_id) const {
  return {{"x-request-id", request_id}, {"x-modelsim-pod", std::to_string(config_.index)}};
}

uint64_t Pod::handle_inference(InferenceRequest request, const std::string& request_id,
                               http::ResponseStreamPtr stream, int64_t created_unix_s,
                               double wall_ms) {
  advance(wall_ms);
  const FaultMode mode = fault_mode(wall_ms);
  if (mode == FaultMode::kError) {
    auto r = error_response(500, "simulated engine failure (fault injection)");
    r.headers = response_headers(request_id);
    stream->respond(std::move(r));
    return 0;
  }
  if (mode == FaultMode::kClose && fault_.after_tokens == 0) {
    stream->close_connection();
    return 0;
  }
  const uint64_t key = next_key_++;
  sim::SimRequest sr = sim::make_request(key, request.prompt_tokens, root_, request.max_tokens,
                                         config_.engine.block_size);
  sr.priority = request.priority;
  const auto submitted = engine_.submit(std::move(sr));
  if (!submitted.accepted) {
    auto r = error_response(400, submitted.error);
    r.headers = response_headers(request_id);
    stream->respond(std::move(r));
    return 0;
  }
  const bool chat = request.chat;
  ResponseFormatter format(chat, (chat ? "chatcmpl-" : "cmpl-") + request_id, created_unix_s,
                           config_.protocol.model_name, request.prompts);
  Live live{std::move(request), stream, std::move(format)};
  live.request.prompt_tokens.clear();  // no longer needed; keep memory small
  live.request.prompt_tokens.shrink_to_fit();
  if (mode == FaultMode::kClose) {
    live.close_after = fault_.after_tokens;
  }
  if (live.request.stream) {
    stream->begin_stream(200, "text/event-stream; charset=utf-8", response_headers(request_id));
  }
  live_.emplace(key, std::move(live));
  run_engine(wall_ms);  // a step may start now
  return key;
}

void Pod::client_gone(uint64_t key, double wall_ms) {
  advance(wall_ms);
  if (live_.erase(key) > 0) {
    engine_.abort(key);
  }
}

void Pod::expire_fault(double wall_ms) {
  if (fault_.mode == FaultMode::kNone || wall_ms < fault_until_) {
    return;
  }
  const double end = fault_until_;
  const bool was_stall = fault_.mode == FaultMode::kStall;
  fault_ = FaultSpec{};
  fault_until_ = kInf;
  if (was_stall) {
    clock_.thaw(end);
  }
}

FaultMode Pod::fault_mode(double wall_ms) {
  expire_fault(wall_ms);
  return fault_.mode;
}

double Pod::slow_delay_ms(double wall_ms) {
  return fault_mode(wall_ms) == FaultMode::kSlow ? fault_.delay_ms : 0.0;
}

http::Response Pod::set_fault(const FaultSpec& fault, double wall_ms) {
  advance(wall_ms);
  if (fault_.mode == FaultMode::kStall && fault.mode != FaultMode::kStall) {
    clock_.thaw(wall_ms);
  }
  fault_ = fault;
  fault_until_ =
      fault.mode != FaultMode::kNone && fault.duration_ms > 0 ? wall_ms + fault.duration_ms : kInf;
  if (fault.mode == FaultMode::kStall) {
    clock_.freeze(wall_ms);
  }
  if (fault.mode != FaultMode::kStall && !held_.empty()) {
    advance(wall_ms);  // releases what a previous stall held
  }
  return http::Response::json(200, Json{{"pod", config_.index},
                                        {"mode", fault_mode_name(fault_.mode)},
                                        {"duration_ms", fault_.duration_ms},
                                        {"after_tokens", fault_.after_tokens}});
}

void Pod::advance(double wall_ms) {
  expire_fault(wall_ms);
  run_engine(wall_ms);
  if (fault_.mode != FaultMode::kStall && !held_.empty()) {
    auto held = std::move(held_);
    held_.clear();
    for (auto& fn : held) {
      fn();
    }
  }
}

void Pod::run_engine(double wall_ms) {
  events_.clear();
  engine_.advance_to(clock_.sim(wall_ms), events_);
  touched_.clear();
  for (const auto& ev : events_) {
    auto it = live_.find(ev.request_id);
    if (it == live_.end()) {
      continue;
    }
    Live& l = it->second;
    if (l.cut) {
      continue;
    }
    switch (ev.type) {
      case sim::EventType::kFirstToken:
      case sim::EventType::kToken: {
        const std::string text = " " + sim::vocab_word(ev.word);
        ++l.tokens;
        if (l.request.stream) {
          if (l.out.empty()) {
            touched_.push_back(ev.request_id);
          }
          if (ev.type == sim::EventType::kFirstToken) {
            l.out += l.format.role_chunk();
          }
          l.out += l.format.token_chunk(text, ev.token_index + 1 >= l.request.max_tokens);
          if (l.close_after > 0 && l.tokens >= l.close_after) {
            l.cut = true;
          }
        } else {
          l.text += text;
        }
        break;
      }
      case sim::EventType::kFinished: {
        metrics_.observe_finished(ev.stats);
        const Usage usage{ev.stats.prompt_tokens, ev.stats.output_tokens, ev.stats.cached_tokens};
        l.finished = true;
        if (l.request.stream) {
          if (l.out.empty()) {
            touched_.push_back(ev.request_id);
          }
          if (l.request.include_usage) {
            l.out += l.format.usage_chunk(usage);
          }
          l.out += ResponseFormatter::done_chunk();
        } else {
          auto r =
              http::Response::text(200, l.format.full_response(l.text, usage), "application/json");
          r.headers = {{"x-modelsim-pod", std::to_string(config_.index)}};
          l.stream->respond(std::move(r));
          live_.erase(it);
        }
        break;
      }
      case sim::EventType::kPreempted:
        break;
    }
  }
  for (uint64_t key : touched_) {
    auto it = live_.find(key);
    if (it == live_.end()) {
      continue;
    }
    Live& l = it->second;
    l.stream->write(std::move(l.out));
    l.out.clear();
    if (l.cut) {
      l.stream->close_connection();
      if (!l.finished) {
        engine_.abort(key);
      }
      live_.erase(it);
    } else if (l.finished) {
      l.stream->end();
      live_.erase(it);
    }
  }
}

double Pod::next_wakeup() const {
  double next = clock_.wall_at(engine_.next_event_time());
  if (fault_.mode != FaultMode::kNone) {
    next = std::min(next, fault_until_);
  }
  return next;
}

http::Response Pod::health(double wall_ms) {
  advance(wall_ms);
  if (fault_mode(wall_ms) == FaultMode::kError) {
    return error_response(500, "simulated engine failure (fault injection)");
  }
  return http::Response::text(200, "");
}

http::Response Pod::metrics(double wall_ms) {
  advance(wall_ms);
  metrics_.update(engine_.metrics());
  return http::Response::text(200, metrics_.serialize(), metrics::kContentType);
}

http::Response Pod::state(double wall_ms) {
  advance(wall_ms);
  const auto m = engine_.metrics();
  const auto& c = config_.engine;
  return http::Response::json(200, Json{{"pod", config_.index},
                                        {"profile", c.profile.name},
                                        {"model", config_.protocol.model_name},
                                        {"time_scale", config_.time_scale},
                                        {"scheduling_policy", sim::policy_name(c.policy)},
                                        {"fault", fault_mode_name(fault_.mode)},
                                        {"sim_now_ms", m.now_ms},
                                        {"num_running", m.num_running},
                                        {"num_waiting", m.num_waiting},
                                        {"kv_usage", m.kv_usage},
                                        {"num_gpu_blocks", m.num_gpu_blocks},
                                        {"num_free_blocks", m.num_free_blocks},
                                        {"num_cached_blocks", m.num_cached_blocks},
                                        {"prefix_cache_queries", m.prefix_cache_queries},
                                        {"prefix_cache_hits", m.prefix_cache_hits},
                                        {"num_preemptions", m.num_preemptions},
                                        {"num_evictions", m.num_evictions},
                                        {"requests_finished", m.requests_finished},
                                        {"requests_aborted", m.requests_aborted},
                                        {"generation_tokens", m.generation_tokens},
                                        {"steps", m.steps},
                                        {"live_requests", live_.size()}});
}

}  // namespace llmd::modelsim
