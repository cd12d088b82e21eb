#include "epp/plugins/register.h"

#include "epp/plugins/admitter/latency_slo/latency_slo_admitter.h"
#include "epp/plugins/datalayer/core_metrics_extractor/core_metrics_extractor.h"
#include "epp/plugins/datalayer/metrics_data_source/metrics_data_source.h"
#include "epp/plugins/filter/prefix_cache_affinity/prefix_cache_affinity_filter.h"
#include "epp/plugins/filter/slo_headroom_tier/slo_headroom_tier_filter.h"
#include "epp/plugins/picker/max_score/max_score_picker.h"
#include "epp/plugins/picker/near_best_rotation/near_best_rotation_picker.h"
#include "epp/plugins/picker/round_robin/round_robin_picker.h"
#include "epp/plugins/parser/openai/openai_parser.h"
#include "epp/plugins/picker/weighted_random/weighted_random_picker.h"
#include "epp/plugins/producer/approx_prefix_cache/approx_prefix_cache_producer.h"
#include "epp/plugins/producer/predicted_latency/predicted_latency_producer.h"
#include "epp/plugins/profile_handler/single/single_profile_handler.h"
#include "epp/plugins/scorer/kv_cache/kv_cache_scorer.h"
#include "epp/plugins/scorer/latency/latency_scorer.h"
#include "epp/plugins/scorer/prefix_cache/prefix_cache_scorer.h"
#include "epp/plugins/scorer/queue/queue_scorer.h"

namespace llmd::epp {

void register_builtin_plugins(PluginRegistry& r) {
  // Producers and admitters (run for every request, in config order).
  r.add(ApproxPrefixCacheProducer::kType, &ApproxPrefixCacheProducer::create);
  r.add(PredictedLatencyProducer::kType, &PredictedLatencyProducer::create);
  r.add(LatencySloAdmitter::kType, &LatencySloAdmitter::create);
  // Filters.
  r.add(PrefixCacheAffinityFilter::kType, &PrefixCacheAffinityFilter::create);
  r.add(SloHeadroomTierFilter::kType, &SloHeadroomTierFilter::create);
  // Scorers.
  r.add(LatencyScorer::kType, &LatencyScorer::create);
  r.add(QueueScorer::kType, &QueueScorer::create);
  r.add(KvCacheScorer::kType, &KvCacheScorer::create);
  r.add_alias("kv-cache-utilization-scorer", KvCacheScorer::kType);  // llm-d's name
  r.add(PrefixCacheScorer::kType, &PrefixCacheScorer::create);
  // Pickers.
  r.add(WeightedRandomPicker::kType, &WeightedRandomPicker::create);
  r.add(MaxScorePicker::kType, &MaxScorePicker::create);
  r.add(RoundRobinPicker::kType, &RoundRobinPicker::create);
  r.add(NearBestRotationPicker::kType, &NearBestRotationPicker::create);
  // Configuration plugins (epp/scheduler/config_plugins.h): read at load time, not per request.
  r.add(MetricsDataSourcePlugin::kType, &MetricsDataSourcePlugin::create);
  r.add(CoreMetricsExtractor::kType, &CoreMetricsExtractor::create);
  r.add(OpenAiParser::kType, &OpenAiParser::create);
  r.add(SingleProfileHandler::kType, &SingleProfileHandler::create);
}

}  // namespace llmd::epp
