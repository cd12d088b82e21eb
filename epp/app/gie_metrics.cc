#include "epp/app/gie_metrics.h"

#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <chrono>

#include "epp/datastore/pod_registry.h"
#include "epp/datastore/prefix_index.h"
#include "epp/queue/admission_gate.h"

#ifndef LLMD_COMMIT_SHA
#define LLMD_COMMIT_SHA "unknown"
#endif
#ifndef LLMD_BUILD_REF
#define LLMD_BUILD_REF "unknown"
#endif

namespace llmd::epp {
namespace {

prometheus::Family<prometheus::Gauge>& gauge(prometheus::Registry& r, const std::string& name,
                                             const std::string& help) {
  return prometheus::BuildGauge().Name(name).Help("[ALPHA] " + help).Register(r);
}

}  // namespace

BuildInfo BuildInfo::of_this_build() {
  return {LLMD_COMMIT_SHA, LLMD_BUILD_REF};
}

void GieMetrics::Shown::set(const std::map<std::string, std::string>& labels, double value) {
  family->Add(labels).Set(value);
  current.insert(labels);
}

void GieMetrics::Shown::end_refresh() {
  for (const auto& labels : previous) {
    if (!current.contains(labels)) {
      family->Remove(&family->Add(labels));
    }
  }
  previous = std::move(current);
  current.clear();
}

GieMetrics::GieMetrics(prometheus::Registry& r, GieMetricSources sources, const BuildInfo& build)
    : sources_(std::move(sources)),
      kv_{&gauge(r, "inference_pool_average_kv_cache_utilization",
                 "The average kv cache utilization for an inference server pool.")},
      queue_{&gauge(r, "inference_pool_average_queue_size",
                    "The average number of requests pending in the model server queue.")},
      running_{&gauge(r, "inference_pool_average_running_requests",
                      "The average number of running requests across model servers in the "
                      "pool.")},
      ready_{&gauge(r, "inference_pool_ready_pods",
                    "The number of ready pods in the inference server pool.")},
      per_pod_{&gauge(r, "inference_pool_per_pod_queue_size",
                      "The total number of requests pending in the model server queue for each "
                      "underlying pod.")},
      saturation_{&gauge(r, "inference_extension_flow_control_pool_saturation",
                         "Current saturation level of the inference pool (0.0 = empty, 1.0 = "
                         "fully saturated): the share of its ready pods at a router queue "
                         "threshold.")},
      prefix_size_(&gauge(r, "inference_extension_prefix_indexer_size",
                          "Size of the prefix indexer (entries over all pods).")
                        .Add({})) {
  gauge(r, "inference_extension_info",
        "General information of the current build of Inference Extension.")
      .Add({{"commit", build.commit}, {"build_ref", build.build_ref}})
      .Set(1);
}

void GieMetrics::refresh() {
  const auto now = std::chrono::steady_clock::now();
  struct Totals {
    double kv = 0, waiting = 0, running = 0, ready = 0;
  };
  std::map<std::string, Totals> pools;  // by GIE pool name
  const auto snapshot = sources_.pods.snapshot();
  for (const auto& p : snapshot->pods) {
    const std::string pool = sources_.pool_name(p.info->pool());
    pools[pool];  // a pool without ready pods shows 0 of them
    per_pod_.set({{"name", pool}, {"model_server_pod", p.info->name}},
                 static_cast<double>(p.info->metrics.waiting));
  }
  for (const auto& e : snapshot->candidates(now)) {
    Totals& t = pools[sources_.pool_name(e.pool())];
    t.kv += e.metrics().kv_cache_usage;
    t.waiting += static_cast<double>(e.metrics().waiting);
    t.running += static_cast<double>(e.metrics().running);
    t.ready += 1;
  }
  for (const auto& [pool, t] : pools) {
    ready_.set({{"name", pool}}, t.ready);
    if (t.ready > 0) {  // as GIE: without ready pods the averages keep their last value
      kv_.set({{"name", pool}}, t.kv / t.ready);
      queue_.set({{"name", pool}}, t.waiting / t.ready);
      running_.set({{"name", pool}}, t.running / t.ready);
    } else {
      kv_.current.insert({{"name", pool}});
      queue_.current.insert({{"name", pool}});
      running_.current.insert({{"name", pool}});
    }
  }
  for (const auto& [pool, share] : sources_.gate.saturation()) {
    saturation_.set({{"inference_pool", sources_.pool_name(pool)}}, share);
  }
  for (Shown* s : {&kv_, &queue_, &running_, &ready_, &per_pod_, &saturation_}) {
    s->end_refresh();
  }
  prefix_size_->Set(static_cast<double>(sources_.prefix_index.stats().blocks));
}

}  // namespace llmd::epp
