#pragma once
// The Gateway API Inference Extension's (GIE v1.5.0) per-request families, under its names,
// types and label names, fed from the same dispatch and completion records as our own request
// metrics (docs/coming-from-upstream.md lists each and how we fill it):
//   inference_objective_request_total{model_name,target_model_name,priority}  (dispatched)
//   inference_objective_request_error_total{model_name,target_model_name,error_code}
//   inference_objective_request_sizes / response_sizes (bytes), input_tokens, output_tokens,
//     prompt_cached_tokens, normalized_time_per_output_token_seconds{model_name,target_model_name}
//   inference_objective_running_requests{model_name}
//   inference_extension_model_rewrite_decisions_total{model_rewrite_name,model_name,target_model}
//   inference_extension_prefix_indexer_hit_ratio, _hit_bytes (the picked pod's prefix match)
// Label values are bounded by the shared ModelLabels, as our own metrics' are.
//
// Thread-safe (one mutex): the sink calls come from every request strand; refresh() (the
// running-requests gauges) from the metrics server's thread at scrape time.
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "epp/feedback/model_labels.h"
#include "epp/request/completed_request.h"

namespace prometheus {
class Registry;
}

namespace llmd::epp {

// GIE's error_code for an HTTP status the EPP answered itself (its errcommon codes: BadRequest,
// ResourceExhausted, ServiceUnavailable, ...; 502/504, no pod answered: ModelServerError).
const char* gie_error_code(int status);

class GieRequestMetrics : public CompletionSink {
 public:
  // `labels` outlives this object.
  GieRequestMetrics(prometheus::Registry& registry, ModelLabels& labels);
  ~GieRequestMetrics() override;

  void on_dispatched(const CompletedRequest& req) override;
  void on_completed(const CompletedRequest& done) override;
  void on_rejected(const std::string& model, int status) override;

  // Sets inference_objective_running_requests from the dispatches not yet completed, each under
  // its model's label as of now (a name that joined the labels since moves its count along).
  void refresh();

 private:
  struct Families;
  struct Children;
  Children& children(const std::string& model, const std::string& target);  // mu_ held

  std::unique_ptr<Families> families_;
  ModelLabels& labels_;
  std::mutex mu_;
  // (model_name, target_model_name) -> children; guarded by mu_
  std::map<std::pair<std::string, std::string>, std::unique_ptr<Children>> by_model_;
  // Dispatches not yet completed by requested model (raw names: erased at 0, so at most one
  // entry per request in flight); guarded by mu_.
  std::map<std::string, int64_t> running_;
  // Labels a running-requests series shows for (at most ModelLabels::kMax + 1); guarded by mu_.
  std::set<std::string> running_shown_;
};

}  // namespace llmd::epp
