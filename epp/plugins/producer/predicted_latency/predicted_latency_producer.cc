#include "epp/plugins/producer/predicted_latency/predicted_latency_producer.h"

#include <algorithm>
#include <chrono>

#include <spdlog/spdlog.h>

#include "epp/features/feature_row.h"

namespace llmd::epp {

std::string PredictedLatencyProducer::Config::validate() const {
  if (!(predictionDeadlineMs > 0 && predictionDeadlineMs <= 60000)) {
    return param_error("predictionDeadlineMs", predictionDeadlineMs, "in (0, 60000]");
  }
  if (!(sloBufferFactor > 0)) {
    return param_error("sloBufferFactor", sloBufferFactor, "> 0");
  }
  if (!(samplingMean > 0)) {
    return param_error("samplingMean", samplingMean, "> 0");
  }
  if (maxDecodeTokenSamplesForPrediction < 0) {
    return param_error("maxDecodeTokenSamplesForPrediction",
                       static_cast<double>(maxDecodeTokenSamplesForPrediction), ">= 0");
  }
  if (contextTTL.count() < 0) {
    return "parameter 'contextTTL' must be >= 0";
  }
  return {};
}

PluginOrError PredictedLatencyProducer::create(const std::string& name,
                                               const nlohmann::json& params, const Handle& handle) {
  Config c;
  ParamReader r(params);
  r.get("predictionDeadlineMs", c.predictionDeadlineMs)
      .get("streamingMode", c.streamingMode)
      .get("podResidualCorrection", c.podResidualCorrection)
      .get("stepPhaseCorrection", c.stepPhaseCorrection)
      .get("sloBoundCalibration", c.sloBoundCalibration)
      .get("lateFirstTokenCorrection", c.lateFirstTokenCorrection)
      .get("predictInProduce", c.predictInProduce, "predictInPrepareData")  // llm-d, GIE
      .get("sloBufferFactor", c.sloBufferFactor)
      .get("endpointRoleLabel", c.endpointRoleLabel)
      .get("samplingMean", c.samplingMean)
      .get("maxDecodeTokenSamplesForPrediction", c.maxDecodeTokenSamplesForPrediction)
      .get("contextTTL", c.contextTTL);
  if (auto e = r.finish(); !e.empty()) {
    return PluginOrError::fail(e);
  }
  if (auto e = c.validate(); !e.empty()) {
    return PluginOrError::fail(e);
  }
  for (const char* key : {"samplingMean", "maxDecodeTokenSamplesForPrediction", "contextTTL"}) {
    if (r.has(key)) {
      spdlog::info("{} '{}': {} has no effect here (README: upstream parameters)", kType, name,
                   key);
    }
  }
  if (handle.prediction_source == nullptr) {
    // Degraded but legal (no predictor configured): scorers use the composite fallback.
    spdlog::warn("{} '{}': no prediction source configured; requests use composite scoring", kType,
                 name);
  }
  return {
      std::make_shared<PredictedLatencyProducer>(name, c, handle.prediction_source, handle.clock()),
      {}};
}

PredictedLatencyProducer::PredictedLatencyProducer(std::string name, Config config,
                                                   PredictionSource* source, Handle::Now now)
    : PluginBase(kType, std::move(name)), config_(config), source_(source), now_(std::move(now)) {}

LatencyPredictionInfo PredictedLatencyProducer::info_for(const SchedulingRequest& request,
                                                         const Endpoint& e, const Prediction& p,
                                                         double ttft_phase_ms) const {
  const bool per_pod = config_.podResidualCorrection;
  const double ttft_factor = per_pod ? e.ttft_residual_factor : 1.0;
  const double tpot_factor = per_pod ? e.tpot_residual_factor : 1.0;
  // A predictor without central estimates (the reference) leaves them < 0: the bound serves.
  auto or_bound = [](double expected, double bound) { return expected >= 0 ? expected : bound; };
  LatencyPredictionInfo info;
  info.ttft_late_ms = config_.lateFirstTokenCorrection ? e.ttft_late_ms : 0.0;
  info.unphased_ttft_ms = std::max(0.0, p.ttft_ms * ttft_factor) + info.ttft_late_ms;
  info.unphased_expected_ttft_ms =
      std::max(0.0, or_bound(p.ttft_expected_ms, p.ttft_ms) * ttft_factor) + info.ttft_late_ms;
  const double ttft = std::max(0.0, info.unphased_ttft_ms + ttft_phase_ms);
  const double tpot = p.tpot_ms * tpot_factor;
  info.model_ttft_ms = p.ttft_ms;
  info.model_tpot_ms = p.tpot_ms;
  info.predicted_ttft_ms = ttft;
  info.predicted_tpot_ms = tpot;
  info.ttft_phase_ms = ttft_phase_ms;
  info.expected_ttft_ms = std::max(0.0, info.unphased_expected_ttft_ms + ttft_phase_ms);
  info.expected_tpot_ms = or_bound(p.tpot_expected_ms, p.tpot_ms) * tpot_factor;
  // The SLO check scales the bound by what made the pool's bounds hold lately (BoundCoverage).
  const bool calibrate = config_.sloBoundCalibration && request.has_slo();
  const double ttft_bound = calibrate ? ttft * e.ttft_bound_factor : ttft;
  const double tpot_bound = calibrate ? tpot * e.tpot_bound_factor : tpot;
  // Without a TTFT SLO the headroom is -predicted: still orders pods by predicted TTFT.
  info.ttft_headroom_ms = request.slo_ttft_ms.value_or(0.0) - ttft_bound;
  info.ttft_valid = !request.slo_ttft_ms || ttft_bound < *request.slo_ttft_ms;
  // TPOT means nothing for non-streaming requests (and is untrained in non-streaming mode) and
  // prefill pods generate no tokens: neutral (valid, headroom 0) so it cannot skew tiers.
  bool neutral = !config_.streamingMode || !request.streaming || e.role() == "prefill";
  if (!neutral && request.slo_tpot_ms) {
    const double slo = *request.slo_tpot_ms * config_.sloBufferFactor;  // upstream's buffer
    info.tpot_headroom_ms = slo - tpot_bound;
    info.tpot_valid = tpot_bound < slo;
  }
  return info;
}

double PredictedLatencyProducer::step_phase_ms(const SchedulingRequest& request, const Endpoint& e,
                                               std::chrono::steady_clock::time_point now) const {
  // Queued or prefilling work on the pod starts after the step in progress too, but how many
  // steps it takes is the model's business; the phase is the largest unknown only when the
  // request's own prefill is next. SLO traffic keeps the phase-averaged prediction: its check
  // is a bound that must hold whatever the phase (shifted by it, the benchmark's SLO run lost
  // 0.2-0.6 points of attainment on every seed, scored with or without the shift).
  if (!config_.stepPhaseCorrection || request.has_slo() || !e.step || e.dispatched <= 0 ||
      e.prefill_tokens_in_flight > 0 || e.metrics().waiting > 0) {
    return 0;
  }
  return step_arrival_delay_ms(*e.step, now).value_or(0.0);
}

std::vector<features::FeatureInput> PredictedLatencyProducer::rows_for(
    const CycleContext& ctx, const std::vector<Endpoint>& endpoints) const {
  std::vector<features::FeatureInput> rows;
  if (source_ == nullptr || !ctx.request.prediction_enabled) {
    return rows;
  }
  rows.reserve(endpoints.size());
  for (const auto& e : endpoints) {
    rows.push_back(feature_row(ctx.request, e));
  }
  return rows;
}

std::chrono::steady_clock::time_point PredictedLatencyProducer::deadline() const {
  return now_() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                      std::chrono::duration<double, std::milli>(config_.predictionDeadlineMs));
}

void PredictedLatencyProducer::apply(const CycleContext& ctx, std::vector<Endpoint>& endpoints,
                                     const PredictionResult& predictions,
                                     std::chrono::steady_clock::time_point asked) const {
  if (!predictions) {
    spdlog::debug("{} '{}': no predictions for request {}; composite fallback", kType, name(),
                  ctx.request.request_id);
    return;
  }
  if (predictions->size() != endpoints.size()) {
    spdlog::warn("{} '{}': {} predictions for {} rows; ignored", kType, name(), predictions->size(),
                 endpoints.size());
    return;
  }
  // Equal predictions for every pod (the constant of a model not trained yet, or pods in
  // identical states) are no model of what the pod then does: not compared with it.
  const auto& ps = *predictions;
  const bool tie = ps.size() > 1 && std::all_of(ps.begin(), ps.end(), [&](const Prediction& p) {
                     return p.ttft_ms == ps.front().ttft_ms;
                   });
  std::string scaled;  // the pods whose predictions the residual factors changed (debug log)
  std::string phased;  // the pods whose TTFT the step phase shifted (debug log)
  const auto now = now_();
  const double prediction_ms = std::chrono::duration<double, std::milli>(now - asked).count();
  for (std::size_t i = 0; i < endpoints.size(); ++i) {
    const Endpoint& e = endpoints[i];
    // A constant model's tie stays a tie: the scorer's fallback ranks those pods.
    endpoints[i].latency =
        info_for(ctx.request, e, ps[i], tie ? 0.0 : step_phase_ms(ctx.request, e, now));
    endpoints[i].latency->prediction_ms = prediction_ms;
    if (tie) {
      endpoints[i].latency->model_ttft_ms = endpoints[i].latency->model_tpot_ms = 0;
    }
    if (config_.podResidualCorrection &&
        (e.ttft_residual_factor != 1.0 || e.tpot_residual_factor != 1.0) &&
        spdlog::should_log(spdlog::level::debug)) {
      scaled += fmt::format(" {} ttft x{:.2f} tpot x{:.2f}", e.name(), e.ttft_residual_factor,
                            e.tpot_residual_factor);
    }
    if (endpoints[i].latency->ttft_phase_ms != 0 && spdlog::should_log(spdlog::level::debug)) {
      phased += fmt::format(" {} {:+.1f} ms", e.name(), endpoints[i].latency->ttft_phase_ms);
    }
  }
  if (!scaled.empty()) {
    spdlog::debug("{} '{}': request {}: pod residual factors:{}", kType, name(),
                  ctx.request.request_id, scaled);
  }
  if (!phased.empty()) {
    spdlog::debug("{} '{}': request {}: step phase:{}", kType, name(), ctx.request.request_id,
                  phased);
  }
}

void PredictedLatencyProducer::produce(CycleContext& ctx, std::vector<Endpoint>& endpoints) const {
  auto rows = rows_for(ctx, endpoints);
  if (rows.empty()) {
    return;
  }
  const auto asked = now_();
  apply(ctx, endpoints, source_->predict(rows, deadline()), asked);
}

void PredictedLatencyProducer::produce_async(CycleContext& ctx, std::vector<Endpoint>& endpoints,
                                             std::function<void()> done) const {
  auto rows = rows_for(ctx, endpoints);
  if (rows.empty()) {
    done();
    return;
  }
  // The cycle keeps ctx and endpoints alive until `done`.
  source_->predict_async(
      std::move(rows), deadline(),
      [this, &ctx, &endpoints, asked = now_(), done = std::move(done)](PredictionResult p) {
        apply(ctx, endpoints, p, asked);
        done();
      });
}

}  // namespace llmd::epp
