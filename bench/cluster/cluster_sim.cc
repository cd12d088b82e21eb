#include "bench/cluster/cluster_sim.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <deque>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <queue>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include "bench/cluster/inprocess_predictor.h"
#include "bench/sim/sim_engine.h"
#include "epp/datastore/pod_registry.h"
#include "epp/datastore/prefix_index.h"
#include "epp/features/feature_row.h"
#include "epp/interface/rng.h"
#include "epp/plugins/register.h"
#include "epp/feedback/request_metrics.h"
#include "epp/request/scheduling_port.h"
#include "epp/request/completion_fanout.h"
#include "epp/queue/admission_gate.h"
#include "epp/request/request_flow.h"
#include "epp/scheduler/config_loader.h"
#include "epp/scheduler/scheduling_cycle.h"
#include "epp/scheduler/registry.h"
#include "epp/request/epp_scheduling_port.h"

namespace llmd::cluster {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
const std::string kModel = "meta-llama/Llama-3.1-8B-Instruct";

std::optional<std::string> read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return std::nullopt;
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string emit(const YAML::Node& n) {
  YAML::Emitter out;
  out << n;
  return std::string(out.c_str()) + "\n";
}

}  // namespace

std::string_view strategy_name(Strategy s) {
  switch (s) {
    case Strategy::kRoundRobin:
      return "round-robin";
    case Strategy::kLoadPrefix111:
      return "load+prefix(1,1,1)";
    case Strategy::kLoadPrefix322:
      return "load+prefix(3,2,2)";
    case Strategy::kPredictedLeast:
      return "predicted-latency";
    case Strategy::kPredictedMost:
      return "predicted-latency(most)";
    case Strategy::kPredictedUpstream:
      return "predicted-latency(upstream)";
    case Strategy::kOracle:
      return "oracle";
    case Strategy::kOracleCost:
      return "oracle(cost)";
    case Strategy::kOracleSlo:
      return "oracle(slo)";
  }
  return "?";
}

std::string_view strategy_key(Strategy s) {
  switch (s) {
    case Strategy::kRoundRobin:
      return "rr";
    case Strategy::kLoadPrefix111:
      return "lp111";
    case Strategy::kLoadPrefix322:
      return "lp322";
    case Strategy::kPredictedLeast:
      return "pl_least";
    case Strategy::kPredictedMost:
      return "pl_most";
    case Strategy::kPredictedUpstream:
      return "pl_upstream";
    case Strategy::kOracle:
      return "oracle";
    case Strategy::kOracleCost:
      return "oracle_cost";
    case Strategy::kOracleSlo:
      return "oracle_slo";
  }
  return "?";
}

std::optional<Strategy> parse_strategy(std::string_view key) {
  for (Strategy s : kAllStrategies) {
    if (key == strategy_key(s) || key == strategy_name(s)) {
      return s;
    }
  }
  return std::nullopt;
}

bool uses_predictions(Strategy s) {
  return s == Strategy::kPredictedLeast || s == Strategy::kPredictedMost ||
         s == Strategy::kPredictedUpstream;
}

bool is_heuristic(Strategy s) {
  return s == Strategy::kRoundRobin || s == Strategy::kLoadPrefix111 ||
         s == Strategy::kLoadPrefix322;
}

bool is_oracle(Strategy s) {
  return s == Strategy::kOracle || s == Strategy::kOracleCost || s == Strategy::kOracleSlo;
}

std::optional<std::string> pipeline_yaml(Strategy s, const std::string& dir, std::string* error) {
  auto fail = [&](std::string msg) -> std::optional<std::string> {
    if (error != nullptr) {
      *error = std::move(msg);
    }
    return std::nullopt;
  };
  const char* file = nullptr;
  switch (s) {
    case Strategy::kRoundRobin:
      file = "round-robin.yaml";
      break;
    case Strategy::kLoadPrefix111:
    case Strategy::kLoadPrefix322:
      file = "load-prefix.yaml";
      break;
    case Strategy::kPredictedLeast:
    case Strategy::kPredictedMost:
      file = "default-pipeline.yaml";
      break;
    case Strategy::kPredictedUpstream:
      file = "upstream-pipeline.yaml";
      break;
    case Strategy::kOracle:
    case Strategy::kOracleCost:
    case Strategy::kOracleSlo:
      return fail("the oracle has no pipeline");
  }
  const std::string path = (std::filesystem::path(dir) / file).string();
  if (s == Strategy::kPredictedUpstream && !std::filesystem::exists(path)) {
    return fail(std::string(strategy_name(s)) + " needs " + path +
                " (the upstream-faithful pipeline), which does not exist yet; leave pl_upstream "
                "out of --strategies until it does");
  }
  auto text = read_text(path);
  if (!text) {
    return fail("cannot read " + path);
  }
  try {
    if (s == Strategy::kLoadPrefix322) {
      // Same pipeline, weights prefix 3, queue 2, kv 2.
      YAML::Node doc = YAML::Load(*text);
      const std::map<std::string, int> weights = {
          {"prefix-cache-scorer", 3}, {"queue-scorer", 2}, {"kv-cache-scorer", 2}};
      int changed = 0;
      for (auto profile : doc["schedulingProfiles"]) {
        for (auto ref : profile["plugins"]) {
          auto it = weights.find(ref["pluginRef"].as<std::string>());
          if (it != weights.end()) {
            ref["weight"] = it->second;
            ++changed;
          }
        }
      }
      if (changed != 3) {
        return fail(path + ": expected the three load+prefix scorers in the profile");
      }
      return emit(doc);
    }
    if (s == Strategy::kPredictedMost) {
      YAML::Node doc = YAML::Load(*text);
      int changed = 0;
      for (auto plugin : doc["plugins"]) {
        if (plugin["type"].as<std::string>() == "latency-scorer") {
          plugin["parameters"]["headroomSelectionStrategy"] = "most";
          ++changed;
        }
      }
      if (changed != 1) {
        return fail(path + ": expected one latency-scorer");
      }
      return emit(doc);
    }
  } catch (const std::exception& e) {
    return fail(path + ": " + e.what());
  }
  return text;
}

bool RequestResult::meets_slo() const {
  if (!ok) {
    return false;
  }
  if (slo_ttft_ms && ttft_ms > *slo_ttft_ms) {
    return false;
  }
  if (slo_tpot_ms && tpot_ms >= 0 && tpot_ms > *slo_tpot_ms) {
    return false;
  }
  return true;
}

namespace {

std::optional<double> parse_header_ms(const std::vector<std::pair<std::string, std::string>>& hs,
                                      std::string_view name) {
  for (const auto& [k, v] : hs) {
    if (k == name) {
      try {
        return std::stod(v);
      } catch (const std::exception&) {
        return std::nullopt;
      }
    }
  }
  return std::nullopt;
}

// Unique scratch directories for concurrent runs in one process.
std::atomic<uint64_t> g_run_counter{0};

class ScratchDir {
 public:
  explicit ScratchDir(const std::string& base) {
    std::filesystem::path root =
        base.empty() ? std::filesystem::temp_directory_path() : std::filesystem::path(base);
    path_ = root / ("cluster_sim-" + std::to_string(::getpid()) + "-" +
                    std::to_string(g_run_counter.fetch_add(1)));
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

enum class EvKind : int {
  kEngine = 0,    // a pod's next step boundary
  kTimeout = 1,   // a request's client timeout
  kScrape = 2,    // metrics refresh of every pod
  kFlush = 3,     // training feedback flush (every virtual second)
  kRetrain = 4,   // train_once
  kReady = 5,     // a session's next turn may be sent (its previous turn ended)
  kArrival = 6,   // the next trace arrival
  kContinue = 7,  // what request flows posted (router queue wake-ups), at the time posted
  kOutage = 8,    // a pod becomes unreachable: the streams it serves break
};

struct Ev {
  double t;
  EvKind kind;
  uint64_t seq;
  int64_t id;
  bool operator>(const Ev& o) const {
    if (t != o.t) return t > o.t;
    if (kind != o.kind) return kind > o.kind;
    return seq > o.seq;
  }
};

class ClusterRun {
 public:
  ClusterRun(const workload::Trace& trace, const RunConfig& cfg)
      : trace_(trace), cfg_(cfg), rng_(cfg.seed * 0x9e3779b97f4a7c15ull + 17) {
    if (cfg.pool.num_pods < 1 || cfg.pool.num_pods > 1000 || cfg.pool.num_slow < 0 ||
        cfg.pool.num_mid < 0 || cfg.pool.num_slow + cfg.pool.num_mid > cfg.pool.num_pods ||
        !(cfg.pool.kv_scale > 0)) {
      throw std::invalid_argument("bad pool spec");
    }
    std::vector<epp::PodConfig> pod_configs;
    for (int i = 0; i < cfg.pool.num_pods; ++i) {
      sim::EngineConfig ec;
      const bool slow = i >= cfg.pool.num_pods - cfg.pool.num_slow;
      const bool mid = !slow && i >= cfg.pool.num_pods - cfg.pool.num_slow - cfg.pool.num_mid;
      ec.profile = slow ? sim::slow_profile() : mid ? sim::mid_profile() : sim::h100_profile();
      ec.profile.num_gpu_blocks = std::max<int64_t>(
          64, std::llround(static_cast<double>(ec.profile.num_gpu_blocks) * cfg.pool.kv_scale));
      ec.seed = cfg.pool.seed * 1000003ull + static_cast<uint64_t>(i);
      ec.model_name = kModel;
      Pod p(sim::SimEngine{ec});
      p.name = "pod-" + std::to_string(i);
      p.labels = {{"class", ec.profile.name}};
      pod_index_[p.name] = i;
      pod_configs.push_back({p.name, p.name + ":8000", p.labels});
      pods_.push_back(std::move(p));
    }
    for (const auto& o : cfg.outages) {
      if (o.pod < 0 || o.pod >= cfg.pool.num_pods || !(o.from_ms >= 0) || !(o.to_ms > o.from_ms)) {
        throw std::invalid_argument("bad pod outage: pod " + std::to_string(o.pod) + " from " +
                                    std::to_string(o.from_ms) + " to " + std::to_string(o.to_ms) +
                                    " ms");
      }
    }
    // The EPP's pod table and in-flight bookkeeping, on the virtual clock. Scrapes fail only
    // during outages, so staleness never excludes a pod otherwise (the scrape period is a
    // scenario setting).
    if (cfg.epp_replicas < 1 || cfg.epp_replicas > 64) {
      throw std::invalid_argument("epp_replicas must be in [1, 64]");
    }
    const int n_replicas = is_oracle(cfg.strategy) ? 1 : cfg.epp_replicas;
    for (int k = 0; k < n_replicas; ++k) {
      replicas_.push_back(std::make_unique<Replica>());
      replicas_.back()->registry.set_pods(pod_configs);
      refresh_metrics(*replicas_.back());
    }
    if (cfg.replica_sharing != RunConfig::ReplicaSharing::kNone && replicas_.size() > 1) {
      for (auto& r : replicas_) {
        Replica* self = r.get();
        r->index.set_insert_observer(
            [self](const std::string& pod, std::span<const uint64_t> hashes, std::size_t cap) {
              self->outbox.push_back({pod, {hashes.begin(), hashes.end()}, cap});
            });
        const double period = std::max(cfg.scrape_interval_ms, 1.0);
        r->registry.set_peer_expiry(std::chrono::milliseconds(std::llround(3 * period)));
      }
    }
    root_ = sim::root_hash(kModel);
    hash_prompts_ =
        cfg.hash_prompts == HashPrompts::kAlways ||
        (cfg.hash_prompts == HashPrompts::kAuto &&
         (trace.spec.shared_prefix || trace.spec.multi_turn ||
          (trace.mix_spec && (trace.mix_spec->shared_prefix || trace.mix_spec->multi_turn))));
    if (!is_oracle(cfg.strategy)) {
      std::string err;
      auto yaml = cfg.pipeline_override.empty()
                      ? pipeline_yaml(cfg.strategy, cfg.epp_config_dir, &err)
                      : std::optional<std::string>(cfg.pipeline_override);
      if (!yaml) {
        throw std::invalid_argument(err);
      }
      if (uses_predictions(cfg.strategy)) {
        scratch_ = std::make_unique<ScratchDir>(cfg.work_dir);
        const int trainers = cfg.shared_training ? 1 : n_replicas;
        for (int k = 0; k < trainers; ++k) {
          const std::string dir = scratch_->str() + "/trainer-" + std::to_string(k);
          std::filesystem::create_directories(dir);
          predictors_.push_back(std::make_unique<InProcessPredictor>(
              dir, InProcessPredictor::FitOverrides{cfg_.linear_base, cfg_.objective}));
        }
      }
      epp::register_builtin_plugins(registry_);
      for (std::size_t k = 0; k < replicas_.size(); ++k) {
        Replica& r = *replicas_[k];
        r.predictor =
            predictors_.empty() ? nullptr : predictors_[cfg.shared_training ? 0 : k].get();
        epp::Handle handle{r.index, r.predictor,
                           [](std::string_view) -> std::optional<std::string> {
                             return std::nullopt;  // no process environment leaks into a run
                           },
                           [this] { return vclock(now_); }};
        auto loaded = epp::load_pipeline(*yaml, registry_, handle);
        if (!loaded.ok()) {
          throw std::invalid_argument(std::string(strategy_name(cfg.strategy)) + ": " +
                                      loaded.error);
        }
        r.scheduling_cycle = std::make_unique<epp::SchedulingCycle>(loaded.pipeline);
        // The EPP's scheduling port and completion fan-out: what the proxy calls, on the
        // virtual clock (training feedback first, then the prefix index learns the answer).
        r.port = std::make_unique<epp::EppSchedulingPort>(
            *r.scheduling_cycle, r.registry, r.predictor, [this] { return vclock(now_); });
        if (r.predictor != nullptr) {
          r.sinks.add(*r.predictor);
        }
        r.sinks.add(*r.port);
      }
    }
    if (cfg.router_queue) {
      for (auto& r : replicas_) {
        Replica* rep = r.get();
        r->gate = std::make_unique<epp::AdmissionGate>(
            [this, rep](const std::string&) { return rep->registry.candidates(vclock(now_)); },
            nullptr);
        r->gate->configure(*cfg.router_queue);
      }
    }
  }

  RunResult run() {
    const auto wall0 = std::chrono::steady_clock::now();
    const std::size_t n = trace_.requests.size();
    result_.strategy = cfg_.strategy;
    result_.requests.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      const auto& tr = trace_.requests[i];
      auto& r = result_.requests[i];
      r.index = tr.index;
      r.stage = tr.stage;
      r.turn = static_cast<int>(tr.turn);
      r.scheduled_ms = tr.arrival_ms;
      r.slo_ttft_ms = parse_header_ms(tr.headers, "x-slo-ttft-ms");
      r.slo_tpot_ms = parse_header_ms(tr.headers, "x-slo-tpot-ms");
    }
    if (n > 0) {
      push(trace_.requests[0].arrival_ms, EvKind::kArrival, 0);
    }
    if (cfg_.scrape_interval_ms > 0) {
      // Replicas scrape out of phase, as independent processes would.
      for (std::size_t k = 0; k < replicas_.size(); ++k) {
        push(cfg_.scrape_interval_ms * static_cast<double>(k) /
                 static_cast<double>(replicas_.size()),
             EvKind::kScrape, static_cast<int64_t>(k));
      }
    }
    for (const auto& o : cfg_.outages) {
      push(o.from_ms, EvKind::kOutage, o.pod);
    }
    if (!predictors_.empty()) {
      push(1000, EvKind::kFlush, 0);
      push(cfg_.retrain_interval_ms, EvKind::kRetrain, 0);
    }
    std::vector<sim::SimEvent> events;
    while (done_ < n && !heap_.empty()) {
      Ev ev = heap_.top();
      heap_.pop();
      now_ = ev.t;
      switch (ev.kind) {
        case EvKind::kEngine: {
          Pod& p = pods_[static_cast<std::size_t>(ev.id)];
          if (p.key != ev.t) {
            break;  // stale entry
          }
          p.key = kInf;
          events.clear();
          p.engine.advance_to(now_, events);
          handle_events(events);
          reschedule(static_cast<int>(ev.id));
          break;
        }
        case EvKind::kTimeout:
          on_timeout(static_cast<uint64_t>(ev.id));
          break;
        case EvKind::kScrape:
          refresh_metrics(*replicas_[static_cast<std::size_t>(ev.id)]);
          if (auto& gate = replicas_[static_cast<std::size_t>(ev.id)]->gate) {
            gate->tick(vclock(now_));  // fresh metrics may free capacity; waits expire
          }
          if (cfg_.replica_sharing == RunConfig::ReplicaSharing::kAtScrape) {
            share_with_peers(static_cast<std::size_t>(ev.id));
          }
          push(now_ + cfg_.scrape_interval_ms, EvKind::kScrape, ev.id);
          break;
        case EvKind::kFlush:
          for (auto& p : predictors_) {
            p->flush();
          }
          push(now_ + 1000, EvKind::kFlush, 0);
          break;
        case EvKind::kRetrain:
          retrain();
          break;
        case EvKind::kContinue: {
          continue_pending_ = false;
          std::deque<std::function<void()>> due;
          due.swap(continuations_);
          for (auto& continuation : due) {
            continuation();
          }
          break;
        }
        case EvKind::kReady:
          dispatch(static_cast<std::size_t>(ev.id));
          break;
        case EvKind::kOutage:
          break_streams(static_cast<int>(ev.id));
          break;
        case EvKind::kArrival: {
          const auto i = static_cast<std::size_t>(ev.id);
          if (i + 1 < n) {
            push(trace_.requests[i + 1].arrival_ms, EvKind::kArrival, static_cast<int64_t>(i + 1));
          }
          Session& s = sessions_[trace_.requests[i].session];
          if (s.busy) {
            s.pending.push_back(i);  // the previous turn is still running
          } else {
            s.busy = true;
            dispatch(i);
          }
          break;
        }
      }
    }
    result_.end_ms = now_;
    for (std::size_t i = 0; i < pods_.size(); ++i) {
      const auto m = pods_[i].engine.metrics();
      PodSummary ps;
      ps.name = pods_[i].name;
      ps.profile = pods_[i].engine.config().profile.name;
      ps.requests = pods_[i].requests;
      ps.prefix_queries = m.prefix_cache_queries;
      ps.prefix_hits = m.prefix_cache_hits;
      ps.preemptions = m.num_preemptions;
      ps.evictions = m.num_evictions;
      ps.generation_tokens = m.generation_tokens;
      if (auto it = residual_max_.find(static_cast<int>(i)); it != residual_max_.end()) {
        ps.max_ttft_residual_factor = it->second[0];
        ps.max_tpot_residual_factor = it->second[1];
        ps.max_ttft_prediction_scale = it->second[2];
        ps.max_tpot_prediction_scale = it->second[3];
      }
      result_.pods.push_back(ps);
    }
    result_.wall_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
    return std::move(result_);
  }

 private:
  struct Pod {
    explicit Pod(sim::SimEngine e) : engine(std::move(e)) {}
    sim::SimEngine engine;
    std::string name;
    std::map<std::string, std::string> labels;
    int64_t requests = 0;
    double key = kInf;  // time of this pod's live heap entry
  };
  // One EPP replica's state: what a separate EPP process would hold for the same pool.
  struct Replica {
    epp::PodRegistry registry{std::chrono::hours(24 * 365)};  // scrapes never fail here
    epp::PrefixIndex index;
    InProcessPredictor* predictor = nullptr;  // shared or its own; null without predictions
    std::unique_ptr<epp::SchedulingCycle> scheduling_cycle;
    std::unique_ptr<epp::EppSchedulingPort> port;
    epp::CompletionFanout sinks;
    std::unique_ptr<epp::AdmissionGate> gate;  // router queue (null: RunConfig has none)
    // Prefix blocks learned since the last exchange with the peers (replica_sharing).
    struct LearnedBlocks {
      std::string pod;
      std::vector<uint64_t> hashes;
      std::size_t capacity = 0;
    };
    std::vector<LearnedBlocks> outbox;
  };
  struct Session {
    bool busy = false;
    bool started = false;
    std::deque<std::size_t> pending;
    std::vector<sim::TokenId> tokens;  // the conversation so far (what the next turn re-sends)
    std::string text;
  };
  struct InFlight {
    int pod = -1;
    epp::Endpoint picked;  // as seen at dispatch: the training sample's features
    int64_t input_tokens = 0;
    int64_t max_tokens = 0;
    epp::SchedulingRequest request;  // as scheduled (feedback and the prefix index need it)
    // The EPP's request flow (what the proxy and ext_proc run), on the virtual clock.
    std::shared_ptr<epp::RequestFlow> flow;
    int64_t tokens_streamed = 0;  // what the relayed stream has carried so far
    uint64_t output_seed = 0;
    std::vector<sim::TokenId> question_tokens;
    std::string question;
  };
  // A request whose flow has not decided yet (at once without a router queue).
  struct Waiting {
    std::size_t index = 0;
    InFlight f;
    sim::SimRequest sreq;
    Replica* replica = nullptr;
    std::shared_ptr<epp::RequestFlow> flow;
  };

  static std::chrono::steady_clock::time_point vclock(double ms) {
    // Virtual time on the steady clock the EPP plugins read (offset so it is never 0).
    return std::chrono::steady_clock::time_point(std::chrono::hours(1)) +
           std::chrono::duration_cast<std::chrono::steady_clock::duration>(
               std::chrono::duration<double, std::milli>(ms));
  }

  static epp::PodMetrics live_metrics(const Pod& p, double t) {
    const auto m = p.engine.metrics();
    epp::PodMetrics pm;
    pm.kv_cache_usage = m.kv_usage;
    pm.waiting = m.num_waiting;
    pm.running = m.num_running;
    pm.block_size = p.engine.config().block_size;
    pm.num_gpu_blocks = m.num_gpu_blocks;
    pm.scraped_at = vclock(t);
    return pm;
  }

  void push(double t, EvKind kind, int64_t id) { heap_.push(Ev{t, kind, seq_++, id}); }

  void reschedule(int pod) {
    Pod& p = pods_[static_cast<std::size_t>(pod)];
    const double t = p.engine.next_event_time();
    if (t != p.key && std::isfinite(t)) {
      p.key = t;
      push(t, EvKind::kEngine, pod);
    }
  }

  // What the EPP's scraper does every scrape period: every pod's metrics into the registry.
  void refresh_metrics(Replica& r) {
    std::vector<std::pair<std::string, epp::PodMetrics>> scrapes;
    scrapes.reserve(pods_.size());
    for (std::size_t i = 0; i < pods_.size(); ++i) {
      if (!unreachable(static_cast<int>(i))) {
        scrapes.emplace_back(pods_[i].name, live_metrics(pods_[i], now_));
      }
    }
    r.registry.update_metrics(scrapes);  // one snapshot for the whole round
    for (std::size_t i = 0; i < pods_.size(); ++i) {
      if (unreachable(static_cast<int>(i))) {
        r.registry.mark_scrape_failed(pods_[i].name);
      }
    }
  }

  bool unreachable(int pod) const {
    for (const auto& o : cfg_.outages) {
      if (o.pod == pod && o.from_ms <= now_ && now_ < o.to_ms) {
        return true;
      }
    }
    return false;
  }

  // `pod` became unreachable: what it streams breaks mid-response (the connection resets; the
  // client has its headers already, so there is no retry), as the proxy reports it.
  void break_streams(int pod) {
    Pod& p = pods_[static_cast<std::size_t>(pod)];
    std::vector<sim::SimEvent> events;
    p.engine.advance_to(now_, events);
    handle_events(events);
    std::vector<uint64_t> cut;
    for (const auto& [id, f] : inflight_) {
      if (f.pod == pod) {
        cut.push_back(id);
      }
    }
    std::sort(cut.begin(), cut.end());  // inflight_ is unordered: a run must repeat
    for (const uint64_t id : cut) {
      auto it = inflight_.find(id);
      InFlight f = std::move(it->second);
      inflight_.erase(it);
      p.engine.abort(id);
      f.flow->pod_failed(502, false);
      ++result_.streams_broken;
      fail(static_cast<std::size_t>(id), "stream broken: pod unreachable");
    }
    reschedule(pod);
  }

  // The registry's candidates now (exact metrics per decision when there is no scrape period).
  std::vector<epp::Endpoint> candidates(Replica& r) {
    if (cfg_.scrape_interval_ms <= 0) {
      refresh_metrics(r);
    }
    return r.registry.candidates(vclock(now_));
  }

  // Replica k's exchange with its peers: its in-flight snapshot and the blocks it learned.
  void share_with_peers(std::size_t k) {
    if (cfg_.replica_sharing == RunConfig::ReplicaSharing::kNone || replicas_.size() < 2) {
      return;
    }
    Replica& from = *replicas_[k];
    const auto loads = from.registry.own_in_flight();
    const std::string peer = "replica-" + std::to_string(k);
    for (std::size_t j = 0; j < replicas_.size(); ++j) {
      if (j == k) {
        continue;
      }
      Replica& to = *replicas_[j];
      to.registry.set_peer_in_flight(peer, loads, vclock(now_));
      for (const auto& b : from.outbox) {
        to.index.insert_from_peer(b.pod, b.hashes, b.capacity);
      }
    }
    from.outbox.clear();
  }

  // The gateway's split of arrivals between the EPP replicas.
  Replica& next_replica() {
    std::size_t k = 0;
    if (replicas_.size() > 1) {
      k = cfg_.replica_split == RunConfig::ReplicaSplit::kRandom
              ? std::min(replicas_.size() - 1,
                         static_cast<std::size_t>(split_rng_.uniform() *
                                                  static_cast<double>(replicas_.size())))
              : next_replica_++ % replicas_.size();
    }
    return *replicas_[k];
  }

  // Estimate of the TTFT a pod would give `req` now, from the engine's visible state: the rest
  // of the running step, then the steps that prefill the queued work ahead (waiting requests'
  // uncomputed tokens) and the request's own uncached tokens, each step paying the fixed
  // overhead and the decode cost of the running batch (context ~ KV blocks in use) at the
  // profile's rates. Orders and prunes the oracle's probes; the probes themselves are exact.
  double estimate_ttft(const Pod& p, const sim::SimRequest& req) const {
    const auto& cfg = p.engine.config();
    const auto& prof = cfg.profile;
    const auto m = p.engine.metrics();
    const double next = p.engine.next_event_time();
    const double wait_step = std::isfinite(next) ? std::max(0.0, next - now_) : 0.0;
    const double tokens = static_cast<double>(m.prefill_tokens_waiting + uncached_tokens(p, req));
    const double budget =
        std::max(1.0, static_cast<double>(cfg.max_num_batched_tokens - m.num_running));
    const double steps = std::max(1.0, std::ceil(tokens / budget));
    const double context = m.kv_usage * static_cast<double>(m.num_gpu_blocks * cfg.block_size);
    const double decode = prof.decode_ms_per_seq * static_cast<double>(m.num_running) +
                          prof.decode_ms_per_context_token * context;
    return wait_step + steps * (prof.step_overhead_ms + decode) +
           tokens * prof.prefill_ms_per_token;
  }

  // The prompt tokens `req` would have to prefill on `p` (the engine's cache, exactly).
  int64_t uncached_tokens(const Pod& p, const sim::SimRequest& req) const {
    const int64_t block = p.engine.config().block_size;
    const int64_t hits =
        p.engine.block_pool().cached_prefix(req.block_hashes, (req.prompt_tokens - 1) / block);
    return req.prompt_tokens - hits * block;
  }

  // What choosing a pod costs the requests after this one, for the non-myopic oracle (0 for the
  // greedy one). vLLM serves its waiting queue first come, first served, so a request's own
  // prefill delays every request that arrives at its pod while it waits; in a pool the router
  // keeps even, about as many arrive during that wait as wait on a pod now (Little's law). The
  // charge is its prefill time on that pod times the pool's mean waiting queue: nothing at low
  // load (the greedy oracle), and in overload a cache hit is worth the prefill it spares
  // everyone behind. No fitted constant.
  std::vector<double> behind_cost(const sim::SimRequest& req) const {
    std::vector<double> out(pods_.size(), 0.0);
    if (cfg_.strategy != Strategy::kOracleCost || pods_.empty()) {
      return out;
    }
    double waiting = 0;
    for (const Pod& p : pods_) {
      waiting += static_cast<double>(p.engine.metrics().num_waiting);
    }
    waiting /= static_cast<double>(pods_.size());
    for (std::size_t i = 0; i < pods_.size(); ++i) {
      out[i] = waiting * static_cast<double>(uncached_tokens(pods_[i], req)) *
               pods_[i].engine.config().profile.prefill_ms_per_token;
    }
    return out;
  }

  // The goodput oracle (kOracleSlo): a request with a TTFT SLO that no probed pod meets in
  // truth misses it wherever it goes, so it joins the longest waiting queue, behind requests
  // that miss anyway, and leaves the other pods' queues to requests that can still meet theirs
  // (round-robin's accident past saturation, done on purpose with perfect knowledge).
  int oracle_pick(const sim::SimRequest& req, std::optional<double> slo_ttft_ms) {
    const ProbedPick best = probe_best(req);
    if (cfg_.strategy != Strategy::kOracleSlo || !slo_ttft_ms || best.cost <= *slo_ttft_ms) {
      return best.pod;
    }
    std::size_t longest = 0;
    for (std::size_t i = 1; i < pods_.size(); ++i) {
      if (pods_[i].engine.metrics().num_waiting > pods_[longest].engine.metrics().num_waiting) {
        longest = i;
      }
    }
    return static_cast<int>(longest);
  }

  // The pod the probes found cheapest, and its cost there: the true TTFT (plus, for
  // kOracleCost, the charge for those behind).
  struct ProbedPick {
    int pod = 0;
    double cost = kInf;
  };
  ProbedPick probe_best(const sim::SimRequest& req) {
    const std::size_t n = pods_.size();
    const std::vector<double> behind = behind_cost(req);
    std::vector<std::pair<double, std::size_t>> order;
    order.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      order.emplace_back(estimate_ttft(pods_[i], req) + behind[i], i);
    }
    std::sort(order.begin(), order.end());
    double best = kInf;  // the lowest cost probed: true TTFT + the charge for those behind
    std::size_t best_pod = order.front().second;
    int probes = 0;
    std::vector<sim::SimEvent> events;
    for (const auto& [est, i] : order) {
      if (cfg_.oracle_max_probes > 0 && probes >= cfg_.oracle_max_probes) {
        ++result_.oracle_truncated;
        break;
      }
      // Jitter (3% lognormal) and requests finishing at the current step can make the true TTFT
      // lower than the estimate: only a pod estimated well above the best true cost found is
      // skipped unprobed.
      if (std::isfinite(best) && 0.85 * (est - behind[i]) + behind[i] > best) {
        break;
      }
      ++probes;
      ++result_.oracle_probes;
      sim::SimEngine copy = pods_[i].engine;
      events.clear();
      copy.advance_to(now_, events);
      if (!copy.submit(req).accepted) {
        continue;
      }
      double limit = best - behind[i];  // a TTFT above this cannot beat the best
      if (cfg_.oracle_horizon_ms > 0) {
        limit = std::min(limit, cfg_.oracle_horizon_ms);
      }
      double ttft = kInf;
      while (true) {
        const double t = copy.next_event_time();
        if (!std::isfinite(t) || t - now_ >= limit) {
          break;
        }
        events.clear();
        copy.advance_to(t, events);
        for (const auto& e : events) {
          if (e.request_id == req.id && e.type == sim::EventType::kFirstToken) {
            ttft = e.time_ms - now_;
          }
        }
        if (std::isfinite(ttft)) {
          break;
        }
      }
      if (ttft + behind[i] < best) {
        best = ttft + behind[i];
        best_pod = i;
      }
    }
    return {static_cast<int>(best_pod), best};
  }

  void fail(std::size_t i, std::string error) {
    auto& r = result_.requests[i];
    r.ok = false;
    r.error = std::move(error);
    finish_turn(i, false, {});
  }

  // The turn ended (success or failure): update the conversation, release the session.
  void finish_turn(std::size_t i, bool ok, const InFlight* f) {
    ++done_;
    const auto& tr = trace_.requests[i];
    Session& s = sessions_[tr.session];
    if (ok && f != nullptr) {
      // The answer becomes part of the conversation (what the load client re-sends).
      s.tokens.insert(s.tokens.end(), f->question_tokens.begin(), f->question_tokens.end());
      if (!s.text.empty()) {
        s.text += ' ';
      }
      s.text += f->question;
      for (int64_t k = 0; k < result_.requests[i].output_tokens; ++k) {
        const uint32_t w = sim::output_word_index(f->output_seed, k);
        s.tokens.push_back(sim::vocab_token(w));
        s.text += ' ';
        s.text += sim::vocab_word(w);
      }
    }
    if (!s.pending.empty()) {
      const std::size_t next = s.pending.front();
      s.pending.pop_front();
      push(now_, EvKind::kReady, static_cast<int64_t>(next));
    } else {
      s.busy = false;
    }
  }

  void dispatch(std::size_t i) {
    const auto& tr = trace_.requests[i];
    auto& r = result_.requests[i];
    r.sent_ms = now_;
    Session& s = sessions_[tr.session];
    if (tr.turn == 0 || !s.started) {
      s.started = true;
      s.text = trace_.system_prompt(tr.group);
      s.tokens = sim::tokenize(s.text);
    }
    InFlight f;
    f.question = trace_.question(tr);
    f.question_tokens = sim::tokenize(f.question);
    std::vector<sim::TokenId> prompt;
    prompt.reserve(s.tokens.size() + f.question_tokens.size());
    prompt.insert(prompt.end(), s.tokens.begin(), s.tokens.end());
    prompt.insert(prompt.end(), f.question_tokens.begin(), f.question_tokens.end());
    f.input_tokens = static_cast<int64_t>(prompt.size());
    f.max_tokens = tr.max_tokens;
    r.prompt_tokens = f.input_tokens;
    f.request.input_tokens = f.input_tokens;  // the oracle's bookkeeping (no scheduling request)

    sim::SimRequest sreq;
    if (hash_prompts_) {
      sreq = sim::make_request(tr.index, prompt, root_, tr.max_tokens);
    } else {
      // No prompt is ever shared (single-turn, no system prompt): the token-count form without
      // block hashes simulates the same timing and keeps engine copies (the oracle) cheap.
      sreq.id = tr.index;
      sreq.prompt_tokens = static_cast<int64_t>(prompt.size());
      sreq.max_output_tokens = tr.max_tokens;
      sreq.output_seed = sim::hash_combine(root_, tr.question_seed);
    }
    sreq.priority = tr.priority < 0 ? 1 : 0;  // vLLM polarity (unused by the FCFS engines)
    f.output_seed = sreq.output_seed;

    ++result_.cycles;
    Replica& rep = next_replica();
    const bool oracle = is_oracle(cfg_.strategy);
    f.request.request_id = "req-" + std::to_string(tr.index);
    if (!oracle) {
      epp::SchedulingRequest req;
      req.request_id = f.request.request_id;
      req.model = kModel;
      req.prompt_text = s.text.empty() ? f.question : s.text + " " + f.question;
      req.input_tokens = f.input_tokens;
      req.streaming = true;
      req.slo_ttft_ms = r.slo_ttft_ms;
      req.slo_tpot_ms = r.slo_tpot_ms;
      req.priority = tr.priority;
      f.request = req;
      if (cfg_.scrape_interval_ms <= 0) {
        refresh_metrics(rep);
      }
      if (cfg_.replica_sharing == RunConfig::ReplicaSharing::kEveryDecision ||
          cfg_.scrape_interval_ms <= 0) {  // exact metrics per decision: exchanges are too
        for (std::size_t k = 0; k < replicas_.size(); ++k) {
          share_with_peers(k);
        }
      }
    }
    if (cfg_.request_timeout_ms > 0) {
      push(now_ + cfg_.request_timeout_ms, EvKind::kTimeout, static_cast<int64_t>(tr.index));
    }
    // The EPP's request flow on the virtual clock. Without a router queue every continuation
    // runs inline (the in-process producers answer at once), so the decision comes inside
    // start_scheduled(); a request the queue holds is decided when a kContinue event runs the
    // gate's wake-up.
    epp::RequestFlow::Post post = [](std::function<void()> continuation) { continuation(); };
    if (rep.gate) {
      post = [this](std::function<void()> continuation) {
        continuations_.push_back(std::move(continuation));
        if (!continue_pending_) {
          continue_pending_ = true;
          push(now_, EvKind::kContinue, 0);
        }
      };
    }
    auto flow = epp::RequestFlow::create(
        epp::FlowOptions{},
        epp::FlowServices{
            oracle ? static_cast<epp::SchedulingPort*>(&oracle_port_) : rep.port.get(),
            &rep.registry, rep.port ? &rep.sinks : nullptr, rep.gate.get(), &rng_},
        std::move(post), [this] { return vclock(now_); });
    const std::string id = f.request.request_id;
    epp::SchedulingRequest request = f.request;
    const int64_t max_tokens = f.max_tokens;
    waiting_.emplace(id, Waiting{i, std::move(f), std::move(sreq), &rep, flow});
    flow->start_scheduled(std::move(request), max_tokens,
                          [this, id](const epp::RequestFlow::Verdict& v) { decided(id, v); });
  }

  // The flow of `id` decided: dispatch to the engine (or fail the request).
  void decided(const std::string& id, const epp::RequestFlow::Verdict& verdict) {
    auto it = waiting_.find(id);
    if (it == waiting_.end()) {
      return;
    }
    Waiting w = std::move(it->second);
    waiting_.erase(it);
    const std::size_t i = w.index;
    const auto& tr = trace_.requests[i];
    auto& r = result_.requests[i];
    InFlight& f = w.f;
    if (w.flow->predictions_used()) {
      ++result_.cycles_with_predictions;
    }
    if (verdict.status != 200) {
      fail(i, "HTTP " + std::to_string(verdict.status) + ": " + verdict.detail);
      return;
    }
    r.queued_ms = now_ - r.sent_ms;
    for (const auto& e : w.flow->ranked()) {
      auto& most =
          residual_max_.try_emplace(pod_index_.at(e.name()), std::array{1.0, 1.0, 1.0, 1.0})
              .first->second;
      most[0] = std::max(most[0], e.ttft_residual_factor);
      most[1] = std::max(most[1], e.tpot_residual_factor);
      if (e.latency && e.latency->model_ttft_ms > 0 && e.latency->model_tpot_ms > 0) {
        most[2] = std::max(most[2], e.latency->unphased_ttft_ms / e.latency->model_ttft_ms);
        most[3] = std::max(most[3], e.latency->predicted_tpot_ms / e.latency->model_tpot_ms);
      }
    }
    // The attempts, as the proxy makes them: a pod that refuses the connection fails before any
    // response byte, and the flow names the next one (one retry) or none.
    const epp::Endpoint* target = w.flow->next_pod();
    while (target != nullptr && unreachable(pod_index_.at(target->name()))) {
      ++result_.attempts_refused;
      w.flow->dispatch();
      w.flow->pod_failed(502, true);
      target = w.flow->next_pod();
    }
    if (target == nullptr) {
      const auto failed = w.flow->exhausted();
      fail(i, "HTTP " + std::to_string(failed.status) + ": " + failed.detail);
      return;
    }
    if (w.flow->attempts() > 0) {
      ++result_.retries;
    }
    f.picked = *target;
    const int pod = pod_index_.at(f.picked.name());
    if (!is_oracle(cfg_.strategy) && f.picked.latency) {
      r.predicted_ttft_ms = f.picked.latency->predicted_ttft_ms;
      r.predicted_tpot_ms = f.picked.latency->predicted_tpot_ms;
      r.expected_ttft_ms = f.picked.latency->expected_ttft_ms;
      r.expected_tpot_ms = f.picked.latency->expected_tpot_ms;
      r.picked_row = epp::feature_row(f.request, f.picked);
    }
    Pod& p = pods_[static_cast<std::size_t>(pod)];
    std::vector<sim::SimEvent> events;
    p.engine.advance_to(now_, events);
    handle_events(events);
    auto sub = p.engine.submit(std::move(w.sreq));
    if (!sub.accepted) {
      fail(i, "HTTP 400: " + sub.error);  // before any dispatch: no bookkeeping to undo
      return;
    }
    r.pod = pod;
    ++p.requests;
    w.flow->dispatch();
    f.flow = std::move(w.flow);
    f.pod = pod;
    inflight_.emplace(tr.index, std::move(f));
    reschedule(pod);
  }

  // The prompt text the next turn sends up to the end of this answer (finish_turn's format).
  std::string continuation_text(const InFlight& f, int64_t output_tokens) const {
    std::string text = f.request.prompt_text;
    for (int64_t k = 0; k < output_tokens; ++k) {
      text += ' ';
      text += sim::vocab_word(sim::output_word_index(f.output_seed, k));
    }
    return text;
  }

  void handle_events(const std::vector<sim::SimEvent>& events) {
    for (const auto& e : events) {
      auto it = inflight_.find(e.request_id);
      if (e.type == sim::EventType::kToken) {
        ++result_.token_events;
        // The relayed stream's token: the end of one step of its pod (PodStepClock).
        if (it != inflight_.end() && it->second.flow) {
          InFlight& f = it->second;
          f.flow->tokens(++f.tokens_streamed, vclock(e.time_ms));
        }
        continue;
      }
      if (it == inflight_.end()) {
        continue;
      }
      InFlight& f = it->second;
      if (e.type == sim::EventType::kFirstToken) {
        ++result_.token_events;
        // The TTFT sample leaves at the first token, as the EPP's TrainingFeedback sends it.
        f.flow->tokens(++f.tokens_streamed, vclock(e.time_ms));
      } else if (e.type == sim::EventType::kFinished) {
        const std::size_t i = static_cast<std::size_t>(e.request_id);
        auto& r = result_.requests[i];
        const auto& st = e.stats;
        r.ok = true;
        r.cached_tokens = st.cached_tokens;
        r.output_tokens = st.output_tokens;
        r.preemptions = st.preemptions;
        // What the client saw includes the router queue's wait; the pod's times do not.
        r.ttft_ms = r.queued_ms + st.ttft_ms();
        r.e2e_ms = r.queued_ms + st.e2e_ms();
        r.tpot_ms = st.output_tokens > 1 ? st.tpot_ms() : -1;
        // What the proxy reads from the stream, then the attempt's end: bookkeeping back,
        // feedback (TPOT sample) and the prefix index learning the answer (the sinks). The
        // engine's times are exact; the steady clock would round them to nanoseconds.
        epp::ResponseFacts facts;
        facts.exact_ttft_ms = st.ttft_ms();
        facts.exact_e2e_ms = st.e2e_ms();
        facts.completion_tokens = st.output_tokens;
        facts.cached_tokens = st.cached_tokens;
        facts.prompt_tokens = st.prompt_tokens;
        if (!is_oracle(cfg_.strategy)) {
          facts.continuation_prompt = continuation_text(f, st.output_tokens);
        }
        f.flow->response_ended(200, std::move(facts), vclock(e.time_ms));
        InFlight moved = std::move(f);
        inflight_.erase(it);
        finish_turn(i, true, &moved);
      }
    }
  }

  void on_timeout(uint64_t id) {
    auto it = inflight_.find(id);
    if (it == inflight_.end()) {
      auto w = waiting_.find("req-" + std::to_string(id));
      if (w != waiting_.end()) {
        // Still in the router queue: it leaves (the flow decides 499, nothing is dispatched).
        auto flow = w->second.flow;
        waiting_.erase(w);
        flow->client_gone();
        fail(static_cast<std::size_t>(id), "timeout");
      }
      return;
    }
    InFlight f = std::move(it->second);
    inflight_.erase(it);
    Pod& p = pods_[static_cast<std::size_t>(f.pod)];
    std::vector<sim::SimEvent> events;
    p.engine.advance_to(now_, events);
    handle_events(events);
    p.engine.abort(id);
    f.flow->client_gone();  // the load client gave up
    reschedule(f.pod);
    fail(static_cast<std::size_t>(id), "timeout");
  }

  void retrain() {
    for (auto& predictor : predictors_) {
      predictor->flush();
      const auto w0 = std::chrono::steady_clock::now();
      auto out = predictor->train();
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
      result_.train_wall_s += secs;
      RetrainRecord rec;
      rec.time_ms = now_;
      rec.published = out.published;
      rec.version = out.version;
      rec.ttft_samples = out.ttft_samples;
      rec.tpot_samples = out.tpot_samples;
      rec.ensemble = out.ensemble;
      rec.wall_s = secs;
      result_.retrains.push_back(rec);
    }
    push(now_ + cfg_.retrain_interval_ms, EvKind::kRetrain, 0);
  }

  const workload::Trace& trace_;
  const RunConfig& cfg_;
  std::vector<Pod> pods_;
  std::unordered_map<std::string, int> pod_index_;
  sim::BlockHash root_ = 0;
  bool hash_prompts_ = true;
  epp::PluginRegistry registry_;
  std::unique_ptr<ScratchDir> scratch_;
  // One trainer for all replicas, or one per replica (RunConfig::shared_training).
  std::vector<std::unique_ptr<InProcessPredictor>> predictors_;
  std::vector<std::unique_ptr<Replica>> replicas_;
  std::size_t next_replica_ = 0;
  // The oracle as a scheduler: it probes copies of the engines (oracle_pick) instead of
  // predicting, so the request flow around it is the one the other strategies run.
  class OraclePort final : public epp::SchedulingPort {
   public:
    explicit OraclePort(ClusterRun& run) : run_(run) {}
    epp::SchedulingGenerationPtr generation() override { return generation_; }
    epp::Route route(const epp::SchedulingRequest&, const epp::SchedulingGeneration&) override {
      return {};
    }
    void pick_async(const epp::SchedulingRequest& request, const epp::Route&,
                    const epp::SchedulingGeneration&, epp::Rng&, Resume,
                    std::function<void(epp::PickResult)> done) override {
      done(run_.oracle_result(request.request_id));
    }
    void estimate_service_ms_async(const epp::SchedulingRequest&, int64_t, Resume,
                                   std::function<void(double)> done) override {
      done(0);
    }

   private:
    ClusterRun& run_;
    const epp::SchedulingGenerationPtr generation_ =
        std::make_shared<const epp::SchedulingGeneration>();
  };
  // The oracle probes the engines with the request being scheduled (waiting for its decision).
  epp::PickResult oracle_result(const std::string& request_id) {
    const Waiting& w = waiting_.at(request_id);
    epp::PickResult out;
    const int pod = oracle_pick(w.sreq, result_.requests[w.index].slo_ttft_ms);
    for (auto& e : candidates(*w.replica)) {
      if (e.name() == pods_[static_cast<std::size_t>(pod)].name) {
        out.ranked.push_back(std::move(e));
      }
    }
    return out;
  }

  OraclePort oracle_port_{*this};
  // Requests between the start of their flow and its decision, by request id.
  std::unordered_map<std::string, Waiting> waiting_;
  std::deque<std::function<void()>> continuations_;  // posted by flows, run by kContinue
  bool continue_pending_ = false;                    // a kContinue event is in the heap
  epp::Rng rng_;
  epp::Rng split_rng_{cfg_.seed * 0x2545f4914f6cdd1dull + 29};
  std::priority_queue<Ev, std::vector<Ev>, std::greater<Ev>> heap_;
  uint64_t seq_ = 0;
  double now_ = 0;
  std::size_t done_ = 0;
  std::unordered_map<uint64_t, Session> sessions_;
  std::unordered_map<uint64_t, InFlight> inflight_;
  // By pod index: the largest TTFT and TPOT residual factors a decision ranked it with, then
  // the largest TTFT and TPOT prediction scales (PodSummary).
  std::map<int, std::array<double, 4>> residual_max_;
  RunResult result_;
};

}  // namespace

RunResult run_cluster(const workload::Trace& trace, const RunConfig& config) {
  ClusterRun run(trace, config);
  return run.run();
}

std::vector<RunConfig::PodOutage> parse_pod_outages(const std::string& spec) {
  std::vector<RunConfig::PodOutage> out;
  std::size_t start = 0;
  while (start < spec.size()) {
    const std::size_t end = std::min(spec.find(',', start), spec.size());
    const std::string item = spec.substr(start, end - start);
    start = end + 1;
    const auto bad = [&item] {
      return std::invalid_argument("bad pod outage '" + item +
                                   "': expected POD:FROM-TO (pod index, virtual seconds)");
    };
    const auto colon = item.find(':');
    const auto dash = item.find('-', colon == std::string::npos ? 0 : colon);
    if (colon == std::string::npos || dash == std::string::npos) {
      throw bad();
    }
    RunConfig::PodOutage o;
    try {
      std::size_t used = 0;
      o.pod = std::stoi(item.substr(0, colon), &used);
      if (used != colon) throw bad();
      const std::string from = item.substr(colon + 1, dash - colon - 1);
      const std::string to = item.substr(dash + 1);
      o.from_ms = std::stod(from, &used) * 1000.0;
      if (used != from.size()) throw bad();
      o.to_ms = std::stod(to, &used) * 1000.0;
      if (used != to.size()) throw bad();
    } catch (const std::logic_error&) {
      throw bad();
    }
    if (o.pod < 0 || !(o.from_ms >= 0) || !(o.to_ms > o.from_ms)) {
      throw bad();
    }
    out.push_back(o);
  }
  return out;
}

// --- Aggregation -------------------------------------------------------------------------------

Dist make_dist(std::vector<double> v) {
  Dist d;
  d.n = v.size();
  if (v.empty()) {
    return d;
  }
  std::sort(v.begin(), v.end());
  auto q = [&](double p) {
    // Linear interpolation between closest ranks.
    const double pos = p * static_cast<double>(v.size() - 1);
    const auto lo = static_cast<std::size_t>(std::floor(pos));
    const auto hi = std::min(v.size() - 1, lo + 1);
    return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
  };
  d.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  d.p50 = q(0.5);
  d.p90 = q(0.9);
  d.p95 = q(0.95);
  d.p99 = q(0.99);
  d.max = v.back();
  return d;
}

namespace {

// One picked pod's prediction against what it did: the bound, the central estimate, actual.
struct PredictedActual {
  double bound = 0;
  double expected = 0;
  double actual = 0;
};

PredictionQuality quality(const std::vector<PredictedActual>& pa) {
  PredictionQuality q;
  q.n = pa.size();
  if (pa.empty()) {
    return q;
  }
  double ape = 0;
  std::size_t covered = 0;
  for (const auto& x : pa) {
    ape += std::fabs(x.expected - x.actual) / x.actual;
    covered += x.actual <= x.bound ? 1 : 0;
  }
  q.mape_percent = 100.0 * ape / static_cast<double>(pa.size());
  q.coverage_percent = 100.0 * static_cast<double>(covered) / static_cast<double>(pa.size());
  return q;
}

// `start_s`: the stage's start; throughput counts until the last of its requests finished.
Summary summarize_subset(const std::vector<const RequestResult*>& rs, double start_s,
                         double duration_s) {
  Summary s;
  s.duration_s = duration_s;
  double last_end_s = start_s + duration_s;
  s.requests = rs.size();
  std::vector<double> ttft, tpot, ntpot, e2e, free_ttft;
  std::vector<PredictedActual> pq_ttft, pq_tpot;
  double out_tokens = 0, cached = 0, prompt = 0;
  std::size_t met = 0, slo_met = 0;
  for (const auto* r : rs) {
    const bool with_slo = r->slo_ttft_ms.has_value() || r->slo_tpot_ms.has_value();
    s.has_slo |= with_slo;
    met += r->meets_slo() ? 1 : 0;
    if (with_slo) {
      ++s.slo_requests;
      slo_met += r->meets_slo() ? 1 : 0;
    } else {
      ++s.free_requests;
    }
    if (!r->ok) {
      continue;
    }
    ++s.ok;
    ttft.push_back(r->ttft_ms);
    if (!with_slo) {
      free_ttft.push_back(r->ttft_ms);
    }
    e2e.push_back(r->e2e_ms);
    if (r->tpot_ms >= 0) {
      tpot.push_back(r->tpot_ms);
    }
    if (r->output_tokens > 0) {
      ntpot.push_back(r->e2e_ms / static_cast<double>(r->output_tokens));
    }
    out_tokens += static_cast<double>(r->output_tokens);
    last_end_s = std::max(last_end_s, (r->sent_ms + r->e2e_ms) / 1000.0);
    cached += static_cast<double>(r->cached_tokens);
    prompt += static_cast<double>(r->prompt_tokens);
    if (r->predicted_ttft_ms >= 0 && r->ttft_ms > 0) {
      pq_ttft.push_back({r->predicted_ttft_ms, r->expected_ttft_ms, r->ttft_ms});
    }
    if (r->predicted_tpot_ms >= 0 && r->tpot_ms > 0) {
      pq_tpot.push_back({r->predicted_tpot_ms, r->expected_tpot_ms, r->tpot_ms});
    }
  }
  s.success_rate = rs.empty() ? 0 : static_cast<double>(s.ok) / static_cast<double>(rs.size());
  s.ttft = make_dist(std::move(ttft));
  s.free_ttft = make_dist(std::move(free_ttft));
  s.slo_pop_attainment =
      s.slo_requests ? static_cast<double>(slo_met) / static_cast<double>(s.slo_requests) : 0;
  s.tpot = make_dist(std::move(tpot));
  s.ntpot = make_dist(std::move(ntpot));
  s.e2e = make_dist(std::move(e2e));
  s.output_tokens_per_s = last_end_s > start_s ? out_tokens / (last_end_s - start_s) : 0;
  s.prefix_hit_rate = prompt > 0 ? cached / prompt : 0;
  s.slo_attainment = rs.empty() ? 0 : static_cast<double>(met) / static_cast<double>(rs.size());
  s.goodput_rps = duration_s > 0 ? static_cast<double>(met) / duration_s : 0;
  s.pred_ttft = quality(pq_ttft);
  s.pred_tpot = quality(pq_tpot);
  return s;
}

}  // namespace

std::vector<Summary> summarize(const workload::Trace& trace, const RunResult& result) {
  std::vector<Summary> out;
  const std::size_t stages = trace.stages.size();
  std::vector<std::vector<const RequestResult*>> by_stage(stages);
  std::vector<const RequestResult*> all;
  for (const auto& r : result.requests) {
    if (r.stage >= 0 && static_cast<std::size_t>(r.stage) < stages) {
      by_stage[static_cast<std::size_t>(r.stage)].push_back(&r);
    }
    all.push_back(&r);
  }
  double start_s = 0;
  for (std::size_t s = 0; s < stages; ++s) {
    Summary sum = summarize_subset(by_stage[s], start_s, trace.stages[s].duration_s);
    start_s += trace.stages[s].duration_s;
    sum.stage = static_cast<int>(s);
    sum.rate = trace.stages[s].rate;
    out.push_back(std::move(sum));
  }
  Summary total = summarize_subset(all, 0, trace.duration_ms() / 1000.0);
  total.stage = -1;
  total.rate = trace.duration_ms() > 0
                   ? static_cast<double>(trace.requests.size()) / (trace.duration_ms() / 1000.0)
                   : 0;
  out.push_back(std::move(total));
  return out;
}

}  // namespace llmd::cluster
