#pragma once
// Prometheus metrics of completed requests (epp.md section 4): actual vs predicted TTFT/TPOT,
// prediction durations, SLO thresholds and violations, requests by code. Labels model_name
// (requested model) and target_model_name (model actually served, the same unless a routing
// rule rewrote it), bounded by ModelLabels. Each latency also goes, under the Gateway API
// Inference Extension's code names, into its consolidated gauge
// inference_objective_inference_request_metric{type} and, for violations, its
// inference_objective_request_slo_violation_total{type}.
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "epp/feedback/model_labels.h"
#include "epp/request/completed_request.h"

namespace prometheus {
class Registry;
}

namespace llmd::epp {

class RequestMetrics : public CompletionSink {
 public:
  // `labels` outlives this object.
  RequestMetrics(prometheus::Registry& registry, ModelLabels& labels);
  ~RequestMetrics() override;
  void on_completed(const CompletedRequest& done) override;
  // Requests answered without dispatch (shed, no pods, bad request, every pod failed).
  void on_rejected(const std::string& model, int status) override;

 private:
  struct Families;
  struct Children;
  Children& children(const std::string& model, const std::string& target_model);
  std::unique_ptr<Families> families_;
  ModelLabels& labels_;
  std::mutex mu_;
  // (model_name, target_model_name) -> children; guarded by mu_
  std::map<std::pair<std::string, std::string>, std::unique_ptr<Children>> by_model_;
};

}  // namespace llmd::epp
