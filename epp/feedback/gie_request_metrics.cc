#include "epp/feedback/gie_request_metrics.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

namespace llmd::epp {
namespace {

using Buckets = prometheus::Histogram::BucketBoundaries;
// GIE v1.5.0's buckets (pkg/epp/metrics/metrics.go), so that its quantile queries read alike.
const Buckets kRequestBytes = {
    64,       128,      256,      512,       1024,      2048,      4096,      8192,    16384,
    32768,    65536,    131072,   262144,    524288,    1048576,   2097152,   4194304, 8388608,
    16777216, 33554432, 67108864, 134217728, 268435456, 536870912, 1073741824};
const Buckets kResponseBytes = {1,    8,    16,   32,   64,    128,   256,  512,
                                1024, 2048, 4096, 8192, 16384, 32778, 65536};
const Buckets kInputTokens = {1,    8,    16,    32,    64,    128,    256,    512,    1024,   2048,
                              4096, 8192, 16384, 32778, 65536, 131072, 262144, 524288, 1048576};
const Buckets kOutputTokens = {1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192};
const Buckets kNtpotSeconds = {0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1,
                               0.2,   0.5,   1.0,   2.0,  5.0,  10.0};
const Buckets kHitRatio = {0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0};
const Buckets kHitBytes = {0,    16,   32,   64,   128,   256,   512,
                           1024, 2048, 4096, 8192, 16384, 32768, 65536};

// GIE's help texts carry the stability level.
std::string alpha(const std::string& help) {
  return "[ALPHA] " + help;
}

}  // namespace

const char* gie_error_code(int status) {
  switch (status) {
    case 400:
    case 413:
    case 422:
      return "BadRequest";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "NotFound";
    case 429:
      return "ResourceExhausted";
    case 500:
      return "Internal";
    case 502:
    case 504:
      return "ModelServerError";
    case 503:
      return "ServiceUnavailable";
    default:
      return "Unknown";
  }
}

struct GieRequestMetrics::Families {
  explicit Families(prometheus::Registry& r) {
    auto counter = [&](const std::string& name, const std::string& help) {
      return &prometheus::BuildCounter().Name(name).Help(alpha(help)).Register(r);
    };
    auto hist = [&](const std::string& name, const std::string& help) {
      return &prometheus::BuildHistogram().Name(name).Help(alpha(help)).Register(r);
    };
    requests = counter("inference_objective_request_total",
                       "Counter of inference objective requests broken out for each model and "
                       "target model (counted when dispatched to a pod).");
    errors = counter("inference_objective_request_error_total",
                     "Counter of inference objective requests errors broken out for each model "
                     "and target model.");
    request_sizes = hist("inference_objective_request_sizes",
                         "Inference objective requests size distribution in bytes for each model "
                         "and target model.");
    response_sizes = hist("inference_objective_response_sizes",
                          "Inference objective responses size distribution in bytes for each "
                          "model and target model.");
    input_tokens = hist("inference_objective_input_tokens",
                        "Inference objective input token count distribution for requests in each "
                        "model.");
    output_tokens = hist("inference_objective_output_tokens",
                         "Inference objective output token count distribution for requests in "
                         "each model.");
    cached_tokens = hist("inference_objective_prompt_cached_tokens",
                         "Inference objective prompt cached token count distribution for "
                         "requests in each model.");
    ntpot = hist("inference_objective_normalized_time_per_output_token_seconds",
                 "Inference objective latency divided by number of output tokens in seconds for "
                 "each model and target model.");
    running = &prometheus::BuildGauge()
                   .Name("inference_objective_running_requests")
                   .Help(alpha("Inference objective number of running requests in each model."))
                   .Register(r);
    rewrites = counter("inference_extension_model_rewrite_decisions_total",
                       "Total number of inference model rewrite decisions (our model-level "
                       "routing rules).");
    hit_ratio = &hist("inference_extension_prefix_indexer_hit_ratio",
                      "Ratio of prefix length matched to total prefix length in the cache "
                      "lookup (the picked pod's).")
                     ->Add({}, kHitRatio);
    hit_bytes = &hist("inference_extension_prefix_indexer_hit_bytes",
                      "Length of the prefix match in number of bytes in the cache lookup (the "
                      "picked pod's).")
                     ->Add({}, kHitBytes);
  }
  prometheus::Family<prometheus::Counter>*requests, *errors, *rewrites;
  prometheus::Family<prometheus::Histogram>*request_sizes, *response_sizes, *input_tokens,
      *output_tokens, *cached_tokens, *ntpot;
  prometheus::Family<prometheus::Gauge>* running;
  prometheus::Histogram* hit_ratio;
  prometheus::Histogram* hit_bytes;
};

struct GieRequestMetrics::Children {
  Children(Families& f, const std::string& model, const std::string& target)
      : families(f), labels{{"model_name", model}, {"target_model_name", target}} {
    request_sizes = &f.request_sizes->Add(labels, kRequestBytes);
    response_sizes = &f.response_sizes->Add(labels, kResponseBytes);
    input_tokens = &f.input_tokens->Add(labels, kInputTokens);
    output_tokens = &f.output_tokens->Add(labels, kOutputTokens);
    cached_tokens = &f.cached_tokens->Add(labels, kInputTokens);
    ntpot = &f.ntpot->Add(labels, kNtpotSeconds);
  }
  // A counter of `family` under these labels plus {key: value}, found once per value.
  prometheus::Counter& counter(std::map<std::string, prometheus::Counter*>& by,
                               prometheus::Family<prometheus::Counter>* family, const char* key,
                               const std::string& value) {
    auto it = by.find(value);
    if (it == by.end()) {
      prometheus::Labels l = labels;
      l.emplace(key, value);
      it = by.emplace(value, &family->Add(l)).first;
    }
    return *it->second;
  }
  Families& families;
  const prometheus::Labels labels;
  prometheus::Histogram *request_sizes, *response_sizes, *input_tokens, *output_tokens,
      *cached_tokens, *ntpot;
  std::map<std::string, prometheus::Counter*> by_priority, by_error, by_rewrite;
};

GieRequestMetrics::GieRequestMetrics(prometheus::Registry& registry, ModelLabels& labels)
    : families_(std::make_unique<Families>(registry)), labels_(labels) {}

GieRequestMetrics::~GieRequestMetrics() = default;

GieRequestMetrics::Children& GieRequestMetrics::children(const std::string& model,
                                                         const std::string& target) {
  auto& c = by_model_[{model, target}];
  if (!c) {
    c = std::make_unique<Children>(*families_, model, target);
  }
  return *c;
}

void GieRequestMetrics::on_dispatched(const CompletedRequest& req) {
  const std::string target_name = req.target_model.empty() ? req.request.model : req.target_model;
  const std::string model = labels_.label(req.request.model, false);
  const std::string target = labels_.label(target_name, false);
  std::lock_guard lock(mu_);
  ++running_[req.request.model];
  if (!req.request.model.empty()) {
    running_shown_.insert(model);  // its series shows from now on, as GIE's after its first Inc
  }
  if (req.attempts != 1) {
    return;  // a retry: the request was counted with its first dispatch
  }
  // GIE counts a request once it is scheduled, with its body's size.
  Children& c = children(model, target);
  c.counter(c.by_priority, families_->requests, "priority", std::to_string(req.request.priority))
      .Increment();
  c.request_sizes->Observe(static_cast<double>(req.request.body_bytes));
  if (!req.rule_id.empty()) {
    prometheus::Labels l{
        {"model_rewrite_name", req.rule_id}, {"model_name", model}, {"target_model", target}};
    families_->rewrites->Add(l).Increment();
  }
  if (req.pod.prefix) {  // GIE: the length always, the ratio of a prompt with a full block
    const PrefixCacheMatchInfo& p = *req.pod.prefix;
    families_->hit_bytes->Observe(static_cast<double>(p.matched_blocks * p.block_chars));
    if (p.total_blocks > 0) {
      families_->hit_ratio->Observe(p.score());
    }
  }
}

void GieRequestMetrics::on_completed(const CompletedRequest& done) {
  const bool served = done.success;
  const std::string model = labels_.label(done.request.model, served);
  const std::string target =
      labels_.label(done.target_model.empty() ? done.request.model : done.target_model, served);
  std::lock_guard lock(mu_);
  if (auto it = running_.find(done.request.model); it != running_.end() && --it->second <= 0) {
    running_.erase(it);
  }
  if (done.before_response || done.client_aborted) {
    // A retry follows or the EPP answers itself (on_rejected); GIE records no error for a
    // client that went away.
    return;
  }
  Children& c = children(model, target);
  if (!done.success) {
    c.counter(c.by_error, families_->errors, "error_code", "ModelServerError").Increment();
  }
  if (done.response_bytes) {
    c.response_sizes->Observe(static_cast<double>(*done.response_bytes));
  }
  if (done.prompt_tokens && *done.prompt_tokens > 0) {
    c.input_tokens->Observe(static_cast<double>(*done.prompt_tokens));
  }
  if (done.completion_tokens && *done.completion_tokens > 0) {
    c.output_tokens->Observe(static_cast<double>(*done.completion_tokens));
    if (done.success) {
      const double seconds = (done.dispatch_delay_ms + done.e2e_ms) / 1000.0;
      c.ntpot->Observe(seconds / static_cast<double>(*done.completion_tokens));
    }
  }
  if (done.cached_tokens) {
    c.cached_tokens->Observe(static_cast<double>(*done.cached_tokens));
  }
}

void GieRequestMetrics::on_rejected(const std::string& model, int status) {
  const std::string m = labels_.label(model, false);
  std::lock_guard lock(mu_);
  Children& c = children(m, m);
  c.counter(c.by_error, families_->errors, "error_code", gie_error_code(status)).Increment();
}

void GieRequestMetrics::refresh() {
  std::map<std::string, double> now;
  std::lock_guard lock(mu_);
  for (const auto& [model, n] : running_) {
    // GIE leaves requests without a model name out.
    if (!model.empty()) {
      const std::string label = labels_.label(model, false);
      now[label] += static_cast<double>(n);
      running_shown_.insert(label);
    }
  }
  for (const auto& label : running_shown_) {
    auto it = now.find(label);
    families_->running->Add({{"model_name", label}}).Set(it == now.end() ? 0 : it->second);
  }
}

}  // namespace llmd::epp
