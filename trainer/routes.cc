#include "trainer/routes.h"

#include "common/model/flat_forest.h"

#include <filesystem>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "common/features/feature_json.h"
#include "common/json/streaming.h"
#include "common/metrics/exposition.h"
#include "common/metrics/http_metrics.h"
#include "common/util/time.h"
#include "trainer/trainer_service.h"

namespace llmd::trainer {
namespace {

using http::Request;
using http::Response;
using json::Json;

Json eval_json(const Evaluation& e) {
  return Json{{"samples", e.samples},
              {"pinball_loss", e.pinball_loss},
              {"coverage_percent", e.coverage_percent},
              {"violation_rate_percent", e.violation_percent},
              {"mae", e.mae},
              {"rmse", e.rmse},
              {"mape_percent", e.mape_percent},
              {"evaluated_at", e.evaluated_at}};
}

Json evaluations_json(const TrainerService& s) {
  auto evals = s.evaluations();
  Json out = Json::object();
  for (Target t : kTargets) {
    Json list = Json::array();
    for (const auto& e : evals[static_cast<int>(t)]) {
      list.push_back(eval_json(e));
    }
    out[std::string(target_name(t)) + "_scores"] = list;
  }
  return out;
}

bool known_model(const std::string& name) {
  for (const char* n : kModelNames) {
    if (name == n) {
      return true;
    }
  }
  return false;
}

class Handlers {
 public:
  Handlers(TrainerService& s, RouteLimits limits) : s_(s), limits_(limits) {}

  Response add_training_data(Request& req) {
    // Rows are built while the body is parsed (json/streaming.h): only the fields around the
    // list and one entry at a time exist as documents. Errors and their order are those of the
    // whole-document reading: the list's shape, then each entry, then batch_id.
    json::Errors errors;
    std::vector<features::TrainingEntry> entries;
    json::Loc loc;
    json::StreamedList list;
    json::ListCallbacks on_list;
    on_list.keep_items = limits_.max_bulk_entries;  // a longer list is refused whole below
    on_list.on_reset = [&] {
      entries.clear();
      errors = json::Errors();  // nothing but entries has been checked yet
    };
    on_list.on_item = [&](std::size_t i, const Json& e) {
      json::LocScope entries_scope(loc, "entries");
      json::LocScope item(loc, static_cast<int64_t>(i));
      features::TrainingEntry& out = entries.emplace_back();
      if (json::expect_object(e, loc, errors)) {
        features::read_training_entry(e, loc, errors, out);
      }
    };
    auto body = json::parse_body_streaming_list(req.body, "entries", on_list, list, errors);
    if (!body) {
      return Response::json(422, errors.body());
    }
    if (!json::expect_object(*body, loc, errors)) {
      return Response::json(422, errors.body());
    }
    if (!list.present) {  // missing, or not a list: the error read_list records
      json::Errors shape;
      json::read_list(*body, "entries", loc, shape, 0, limits_.max_bulk_entries);
      return Response::json(422, shape.body());
    }
    if (list.items > limits_.max_bulk_entries) {
      json::Errors shape;
      json::add_too_long(loc, "entries", limits_.max_bulk_entries, list.items, shape);
      return Response::json(422, shape.body());
    }
    // Optional idempotency key (ours): a retried batch is acknowledged, not ingested again.
    std::string batch_id;
    if (auto id = json::read_optional_string(*body, "batch_id", loc, errors)) {
      batch_id = std::move(*id);
      if (batch_id.size() > kMaxBatchIdBytes) {
        errors.add_at("string_too_long", loc, "batch_id",
                      fmt::format("String should have at most {} characters", kMaxBatchIdBytes),
                      Json(batch_id.substr(0, 16) + "..."));
      }
    }
    if (!errors.empty()) {
      return Response::json(422, errors.body());
    }
    IngestResult result;
    try {
      result = s_.add_entries(entries, batch_id);
    } catch (const std::runtime_error& e) {
      // Not on disk and not in memory: no 202; the client keeps the samples and may retry.
      spdlog::error("ingest not persisted: {}", e.what());
      return Response::detail(503, std::string("samples not persisted: ") + e.what());
    }
    Json out{{"message", fmt::format("Accepted {} training samples.", entries.size())}};
    if (result.duplicate) {
      out["duplicate"] = true;
    }
    return Response::json(202, out);
  }

  Response predict(Request& req) {
    json::Errors errors;
    auto body = json::parse_body(req.body, errors);
    json::Loc loc;
    features::FeatureInput in;
    if (!body || !json::expect_object(*body, loc, errors) ||
        !features::read_feature_input(*body, loc, errors, in)) {
      return Response::json(422, errors.body());
    }
    auto m = s_.models();
    std::vector<features::FeatureInput> rows{in};
    double ttft = 0;
    double tpot = 0;
    try {
      ttft = m->ttft.predict(rows).at(0);
      tpot = m->tpot.predict(rows).at(0);
    } catch (const std::exception& e) {
      return Response::detail(500, std::string("Prediction failed: ") + e.what());
    }
    auto bounds = [](double v) {
      double u = 0.1 * v;
      return Json::array({std::max(0.0, v - 2 * u), v + 2 * u});
    };
    return Response::json(200, Json{{"ttft_ms", ttft},
                                    {"tpot_ms", tpot},
                                    {"ttft_uncertainty", 0.1 * ttft},
                                    {"tpot_uncertainty", 0.1 * tpot},
                                    {"ttft_prediction_bounds", bounds(ttft)},
                                    {"tpot_prediction_bounds", bounds(tpot)},
                                    {"predicted_at", util::now_rfc3339()},
                                    {"model_type", "xgboost"},
                                    {"objective_type", objective()},
                                    {"quantile", s_.config().quantile_alpha}});
  }

  Response flush(Request& req) {
    bool training = true, test = true, metrics = true;
    std::optional<std::string> reason;
    if (!req.body.empty()) {
      json::Errors errors;
      auto body = json::parse_body(req.body, errors);
      json::Loc loc;
      if (body && !body->is_null() && json::expect_object(*body, loc, errors)) {
        training = json::read_bool(*body, "flush_training_data", loc, errors, true);
        test = json::read_bool(*body, "flush_test_data", loc, errors, true);
        metrics = json::read_bool(*body, "flush_metrics", loc, errors, true);
        reason = json::read_optional_string(*body, "reason", loc, errors);
      }
      if (!errors.empty()) {
        return Response::json(422, errors.body());
      }
    }
    FlushResult r = s_.flush(training, test, metrics);
    std::vector<std::string> parts;
    if (training) {
      parts.push_back(
          fmt::format("{} TTFT and {} TPOT training samples", r.training[0], r.training[1]));
    }
    if (test) {
      parts.push_back(fmt::format("{} TTFT and {} TPOT test samples", r.test[0], r.test[1]));
    }
    if (metrics) {
      parts.push_back("evaluation metrics");
    }
    std::string message =
        parts.empty() ? "No data flushed"
                      : "Successfully flushed: " + fmt::format("{}", fmt::join(parts, ", "));
    return Response::json(200, Json{{"success", true},
                                    {"flushed_at", util::now_rfc3339()},
                                    {"reason", reason ? Json(*reason) : Json(nullptr)},
                                    {"ttft_training_samples_flushed", r.training[0]},
                                    {"tpot_training_samples_flushed", r.training[1]},
                                    {"ttft_test_samples_flushed", r.test[0]},
                                    {"tpot_test_samples_flushed", r.test[1]},
                                    {"metrics_cleared", r.metrics_cleared},
                                    {"message", message}});
  }

  Response data_status(Request&) {
    DataStatus d = s_.data_status();
    auto m = s_.models();
    Json buckets = Json::object();
    for (int b = 0; b < kBucketCount; ++b) {
      if (d.buckets[0][b] > 0) {
        buckets[BucketKey::from_index(b).name()] = d.buckets[0][b];
      }
    }
    return Response::json(
        200,
        Json{{"training_data",
              {{"ttft_samples", d.training[0]},
               {"tpot_samples", d.training[1]},
               {"total_samples", d.training[0] + d.training[1]}}},
             {"test_data",
              {{"ttft_samples", d.test[0]},
               {"tpot_samples", d.test[1]},
               {"total_samples", d.test[0] + d.test[1]}}},
             {"ensemble",
              {{"ensemble_mode", s_.config().ensemble_mode},
               {"ensemble_active", m->ensemble_active()},
               {"min_samples_for_split", s_.config().min_samples_for_split},
               {"ttft_noqueue_samples", d.noqueue[0]},
               {"ttft_queued_samples", d.queued[0]},
               {"tpot_noqueue_samples", d.noqueue[1]},
               {"tpot_queued_samples", d.queued[1]}}},
             {"metrics",
              {{"ttft_scores_count", d.scores_count[0]}, {"tpot_scores_count", d.scores_count[1]}}},
             {"bucket_distribution", buckets},
             {"model_ready", true},
             {"last_retrain",
              m->last_retrain ? Json(util::format_rfc3339(*m->last_retrain)) : Json(nullptr)}});
  }

  Response download_info(Request&) {
    auto m = s_.models();
    return Response::json(
        200,
        Json{{"model_type", "xgboost"},
             {"quantile", s_.config().quantile_alpha},
             {"objective_type", objective()},
             {"available_endpoints",
              {{"trees",
                {{"ttft_trees", "/model/ttft/xgb/json"}, {"tpot_trees", "/model/tpot/xgb/json"}}},
               {"models",
                {{"ttft", "/model/ttft/download"},
                 {"tpot", "/model/tpot/download"},
                 {"ttft_gated", "/model/ttft_gated/download"},
                 {"tpot_gated", "/model/tpot_gated/download"}}},
               {"export", "/model/export"}}},
             {"model_status",
              {{"ttft_model_ready", m->ttft.base != nullptr},
               {"tpot_model_ready", m->tpot.base != nullptr}}},
             {"version", m->version},
             {"generation", m->generation},
             {"evaluation_info", evaluations_json(s_)}});
  }

  Response models_list(Request&) {
    auto m = s_.models();
    Json models = Json::object();
    for (const char* name : kModelNames) {
      auto it = m->files.find(name);
      if (it == m->files.end()) {
        models[name] = Json{{"exists", false}, {"size_bytes", 0}, {"last_modified", nullptr}};
      } else {
        models[name] = Json{{"exists", true},
                            {"size_bytes", it->second.bytes->size()},
                            {"last_modified", util::format_rfc3339(it->second.modified)},
                            {"version", it->second.version},
                            {"generation", m->generation}};
      }
    }
    return Response::json(200, Json{{"models", models},
                                    {"model_type", "xgboost"},
                                    {"quantile", s_.config().quantile_alpha},
                                    {"server_time", util::now_rfc3339()},
                                    {"evaluation_metrics", evaluations_json(s_)}});
  }

  // Shared 404 rules of /model/{name}/info and /download.
  const ModelFile* find_model(const std::string& name, const PublishedModels& m, Response& error) {
    if (!known_model(name)) {
      error = Response::detail(404, "Unknown model: " + name);
      return nullptr;
    }
    auto it = m.files.find(name);
    if (it == m.files.end()) {
      error = Response::detail(404, "Model " + name + " not found");
      return nullptr;
    }
    return &it->second;
  }

  Response model_info(Request& req) {
    std::string name(req.param("name"));
    auto m = s_.models();
    Response error;
    const ModelFile* f = find_model(name, *m, error);
    if (f == nullptr) {
      return error;
    }
    return Response::json(200, Json{{"model_name", name},
                                    {"path", s_.model_path(name)},
                                    {"size_bytes", f->bytes->size()},
                                    {"last_modified", util::format_rfc3339(f->modified)},
                                    {"exists", true},
                                    {"model_type", "xgboost"},
                                    {"quantile", s_.config().quantile_alpha},
                                    {"version", f->version},
                                    {"generation", m->generation}});
  }

  Response model_download(Request& req) {
    std::string name(req.param("name"));
    auto m = s_.models();
    Response error;
    const ModelFile* f = find_model(name, *m, error);
    if (f == nullptr) {
      return error;
    }
    Response r = Response::text(200, *f->bytes, "application/octet-stream");
    r.headers.push_back(
        {"content-disposition",
         fmt::format("attachment; filename=\"{}\"",
                     std::filesystem::path(s_.model_path(name)).filename().string())});
    r.headers.push_back({"x-model-version", std::to_string(f->version)});
    return r;
  }

  Response trees(Target t) {
    auto m = s_.models();
    const auto& pred = t == Target::kTtft ? m->ttft : m->tpot;
    if (!pred.base) {
      return Response::detail(404, fmt::format("{} model not available", target_name(t)));
    }
    return Response::text(
        200,
        model::dump_trees_json(pred.base->booster().save(),
                               model::column_info(pred.base->feature_set()).names),
        "application/json");
  }

  Response export_bundle(Request&) {
    auto r = Response::text(200, s_.export_bundle(), "application/gzip");
    r.headers.push_back({"content-disposition", "attachment; filename=\"latency_models.tar.gz\""});
    return r;
  }

  double quantile() const { return s_.config().quantile_alpha; }
  std::string objective() const {
    return std::string(model::objective_name(s_.config().objective));
  }

 private:
  TrainerService& s_;
  RouteLimits limits_;
};

}  // namespace

http::Router make_router(TrainerService& service, prometheus::Registry& registry,
                         RouteLimits limits) {
  auto h = std::make_shared<Handlers>(service, limits);
  auto http_metrics = std::make_shared<metrics::HttpMetrics>(registry, "llmd_trainer");
  http::Router r;
  auto add = [&](const char* method, const char* path, auto fn) {
    http_metrics->add(r, method, path, [h, fn](Request& req) { return fn(*h, req); });
  };
  auto admin = [&](const char* method, const char* path, auto fn) {
    http_metrics->add(r, method, path, [h, fn, token = limits.admin_token](Request& req) {
      if (auto refused = http::require_bearer(token, req)) {
        return *refused;
      }
      return fn(*h, req);
    });
  };
  admin("POST", "/add_training_data_bulk",
        [](Handlers& x, Request& q) { return x.add_training_data(q); });
  add("GET", "/healthz", [](Handlers&, Request&) {
    return Response::json(200, Json{{"status", "ok"}});
  });
  add("GET", "/readyz", [](Handlers&, Request&) {
    return Response::json(200, Json{{"status", "ready"}});
  });
  add("GET", "/", [](Handlers& x, Request&) {
    return Response::json(200, Json{{"message", "Latency Predictor Training Server"},
                                    {"model_type", "xgboost"},
                                    {"objective_type", x.objective()},
                                    {"quantile", x.quantile()},
                                    {"description",
                                     "Collects TTFT/TPOT samples in stratified buckets "
                                     "and retrains XGBoost latency models."}});
  });
  add("POST", "/predict", [](Handlers& x, Request& q) { return x.predict(q); });
  admin("POST", "/flush", [](Handlers& x, Request& q) { return x.flush(q); });
  add("GET", "/data/status", [](Handlers& x, Request& q) { return x.data_status(q); });
  add("GET", "/model/download/info", [](Handlers& x, Request& q) { return x.download_info(q); });
  add("GET", "/models/list", [](Handlers& x, Request& q) { return x.models_list(q); });
  admin("GET", "/model/export", [](Handlers& x, Request& q) { return x.export_bundle(q); });
  add("GET", "/model/ttft/xgb/json", [](Handlers& x, Request&) { return x.trees(Target::kTtft); });
  add("GET", "/model/tpot/xgb/json", [](Handlers& x, Request&) { return x.trees(Target::kTpot); });
  add("GET", "/model/{name}/info", [](Handlers& x, Request& q) { return x.model_info(q); });
  add("GET", "/model/{name}/download", [](Handlers& x, Request& q) { return x.model_download(q); });
  r.add("GET", "/metrics", [&service, &registry](Request&) {
    return Response::text(200, metrics::serialize(registry) + service.reference_metrics_text(),
                          metrics::kContentType);
  });
  return r;
}

}  // namespace llmd::trainer
