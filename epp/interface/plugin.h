#pragma once
// Plugin contracts of the scheduling pipeline (mirrors the llm-d router's extension points).
// Each plugin is one small class with a kebab-case type name and an instance name; the loader
// sorts plugins into lists by interface once, at load time; the request path never casts.
//
// Threading: a loaded pipeline is immutable and shared by all scheduling threads, so plugin
// methods are const and must be thread-safe; mutable shared state (e.g. the prefix index) lives
// behind the Handle with its own synchronisation.
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "epp/interface/endpoint.h"
#include "epp/interface/request.h"

namespace llmd::epp {

class Rng;  // epp/interface/rng.h

// Typed endpoint attributes (epp/attributes/) a plugin writes or reads. The loader uses the
// declarations to check producer order and to add a default producer for a missing attribute.
enum class AttributeKey { kPrefixCacheMatch, kLatencyPrediction };

class Plugin {
 public:
  virtual ~Plugin() = default;
  virtual std::string_view type() const = 0;
  virtual const std::string& name() const = 0;
  virtual std::vector<AttributeKey> produces() const { return {}; }
  virtual std::vector<AttributeKey> consumes() const { return {}; }
  // True when this instance's configuration says latency predictions must not be used at all
  // (the pipeline then skips asking for them).
  virtual bool ignores_predictions() const { return false; }
  // Set when this instance decides how the pool is trained (predicted-latency-producer's
  // streamingMode): true, from streams (TTFT at the first chunk, TPOT); false, TTFT := the
  // end-to-end latency.
  virtual std::optional<bool> training_streaming_mode() const { return std::nullopt; }
};

// What plugins say about their own decision in a cycle whose decision is explained (the
// x-llmd-decision header, the decision log). Written only through CycleContext::notes, which
// is null in every other cycle, so an unexplained request formats nothing. The profile
// attributes each note to the plugin instance that wrote it.
struct DecisionNotes {
  // How a plugin ranked pods its latency predictions could not tell apart (every prediction
  // equal: e.g. the constant of a model not trained yet), one sentence each: what then decided.
  std::vector<std::string> tie_breaks;
};

// Per-request scheduling state handed to every plugin.
struct CycleContext {
  const SchedulingRequest& request;
  Rng& rng;
  DecisionNotes* notes = nullptr;  // non-null only in an explained cycle
};

// Annotates candidates before scheduling. A failed producer never fails the request: it leaves
// its attribute absent.
class DataProducer : public Plugin {
 public:
  virtual void produce(CycleContext& ctx, std::vector<Endpoint>& endpoints) const = 0;
  // A producer that waits for I/O (predictions) overrides this instead of blocking a thread
  // in produce(): it writes its attribute, then calls `done` exactly once, on any thread,
  // possibly inline. `ctx` and `endpoints` stay alive and untouched by others until then.
  // The default runs produce() inline.
  virtual void produce_async(CycleContext& ctx, std::vector<Endpoint>& endpoints,
                             std::function<void()> done) const {
    produce(ctx, endpoints);
    done();
  }
  // Called once after a pod was picked (e.g. to insert the prompt's blocks for that pod).
  virtual void on_picked(CycleContext&, const Endpoint&) const {}
  // Called once when the picked pod finished answering; ctx.request.prompt_text is then the
  // prompt continued by the generated answer (what the pod's KV cache now holds).
  virtual void on_response_complete(CycleContext&, const Endpoint&) const {}
};

struct AdmitDecision {
  bool admit = true;
  int status = 429;    // HTTP status when denied
  std::string reason;  // JSON detail when denied
};

class Admitter : public Plugin {
 public:
  virtual AdmitDecision admit(CycleContext& ctx, std::span<const Endpoint> endpoints) const = 0;
};

class Filter : public Plugin {
 public:
  // Returns the kept subset (may be empty; the profile then stops).
  virtual std::vector<Endpoint> filter(CycleContext& ctx,
                                       std::vector<Endpoint> endpoints) const = 0;
};

class Scorer : public Plugin {
 public:
  // One score per endpoint, in [0,1] (the profile clamps).
  virtual std::vector<double> score(CycleContext& ctx,
                                    std::span<const Endpoint> endpoints) const = 0;
};

struct ScoredEndpoint {
  const Endpoint* endpoint;
  double score;
};

class Picker : public Plugin {
 public:
  // Index into `scored` of the chosen endpoint (scored is non-empty).
  virtual std::size_t pick(CycleContext& ctx, std::span<const ScoredEndpoint> scored) const = 0;
};

using PluginPtr = std::shared_ptr<const Plugin>;

}  // namespace llmd::epp
