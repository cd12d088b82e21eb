#pragma once
// Written by predicted-latency-producer; read by latency-slo-admitter, slo-headroom-tier-filter,
// latency-scorer and the affinity filters' TTFT penalty check. Absent means the pod has no
// prediction (predictor down, deadline passed): consumers fall back (composite scoring) and
// never treat it as "positive with 0 headroom".
namespace llmd::epp {

struct LatencyPredictionInfo {
  // The model's bound (its alpha-quantile, p90 by default): what SLO validity and headroom use,
  // and what ranks pods (measured better than the median on the benchmark's blog run).
  double predicted_ttft_ms = 0;
  double predicted_tpot_ms = 0;
  // SLO - predicted; without an SLO header TTFT headroom = -predicted TTFT and TPOT headroom 0.
  double ttft_headroom_ms = 0;
  double tpot_headroom_ms = 0;
  bool ttft_valid = true;  // predicted < SLO (true without SLO)
  bool tpot_valid = true;  // TPOT is neutralised (valid, headroom 0) for non-streaming and prefill
  // The model's own values before the pod's residual factors (what the pod's measured latency
  // is compared with); 0 = not comparable (the model could not tell the pods apart).
  double model_ttft_ms = 0;
  double model_tpot_ms = 0;
  // The model's central estimate (Prediction::ttft_expected_ms; the bound when the predictor
  // gives none), with the same residual factors: what live error is measured against (a p90
  // bound is off the actual by its spread even when it is exact). Sent with the training
  // entries as expected_*_ms.
  double expected_ttft_ms = 0;
  double expected_tpot_ms = 0;
  // What the pod's step phase adds to (or takes from) the model's TTFT for a request sent now
  // (StepTiming; predicted and expected TTFT include it, the model's own values do not); 0 when
  // unknown or not applied.
  double ttft_phase_ms = 0;
  // How late the pod's most overdue waiting request runs past its bound (Endpoint::ttft_late_ms,
  // when lateFirstTokenCorrection is on): added to every TTFT above except the model's own.
  double ttft_late_ms = 0;
  // The TTFT bound and central estimate before the step phase (the model's values times the
  // pod's residual factor, plus the lateness): what the model, which sees no clock, is trained
  // against and its pod residual is measured on. Kept apart so that nobody subtracts the phase back
  // out of predicted/expected_ttft_ms, which are clamped at 0 after adding it.
  double unphased_ttft_ms = 0;
  double unphased_expected_ttft_ms = 0;
  // How long the request's prediction call took, asked -> answered (one call predicts TTFT and
  // TPOT for every candidate of the cycle, so every pod carries the same value).
  double prediction_ms = 0;
  bool both_valid() const { return ttft_valid && tpot_valid; }
};

}  // namespace llmd::epp
