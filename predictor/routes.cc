#include "predictor/routes.h"

#include <prometheus/counter.h>
#include <prometheus/registry.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include <fmt/compile.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/features/feature_json.h"
#include "common/metrics/exposition.h"
#include "common/metrics/http_metrics.h"
#include "common/util/time.h"
#include "predictor/fast_rows.h"
#include "predictor/model_store.h"
#include "predictor/model_sync.h"

namespace llmd::predictor {
namespace {

using http::Request;
using http::Response;
using json::Json;
using Clock = std::chrono::steady_clock;

class Handlers {
 public:
  Handlers(ModelStore& store, ModelSync& sync, PredictorInfo info, prometheus::Registry& r)
      : store_(store),
        sync_(sync),
        info_(std::move(info)),
        rows_(prometheus::BuildCounter()
                  .Name("llmd_predictor_rows_predicted_total")
                  .Help("Rows predicted (one per candidate pod)")
                  .Register(r)
                  .Add({})) {}

  Response predict(Request& req) {
    features::FeatureInput row;
    if (!parse_row_fast(req.body, row)) {
      json::Errors errors;
      auto body = json::parse_body(req.body, errors);
      json::Loc loc;
      if (!body || !json::expect_object(*body, loc, errors) ||
          !features::read_feature_input(*body, loc, errors, row)) {
        return Response::json(422, errors.body());
      }
    }
    auto models = store_.current();
    if (!models->ready()) {
      return Response::detail(503, "Models not ready");
    }
    fmt::memory_buffer out;
    const std::string meta = prediction_meta(*models);
    double ttft_expected = 0, tpot_expected = 0;
    const double ttft = models->ttft.predict(row, &ttft_expected);
    const double tpot = models->tpot.predict(row, &tpot_expected);
    write_prediction(out, ttft, tpot, ttft_expected, tpot_expected, meta);
    rows_.Increment();
    return Response::text(200, fmt::to_string(out), "application/json");
  }

  Response bulk(Request& req, bool strict) {
    const auto started = Clock::now();
    thread_local std::vector<features::FeatureInput> rows;
    Json slow_body;
    std::size_t too_many_rows = 0;
    if (!parse_bulk_fast(req.body, 1, info_.max_bulk_rows, rows, &too_many_rows)) {
      json::Errors errors;
      if (too_many_rows > 0) {  // counted by the fast parser: no document of a refused body
        json::add_too_long(json::Loc(), "requests", info_.max_bulk_rows, too_many_rows, errors);
        return Response::json(422, errors.body());
      }
      auto body = json::parse_body(req.body, errors);
      json::Loc loc;
      if (!body || !json::expect_object(*body, loc, errors)) {
        return Response::json(422, errors.body());
      }
      const Json* list = json::read_list(*body, "requests", loc, errors, 1, info_.max_bulk_rows);
      if (list == nullptr) {
        return Response::json(422, errors.body());
      }
      rows.assign(list->size(), {});
      json::LocScope scope(loc, "requests");
      for (std::size_t i = 0; i < list->size(); ++i) {
        json::LocScope item(loc, static_cast<int64_t>(i));
        if (json::expect_object((*list)[i], loc, errors)) {
          features::read_feature_input((*list)[i], loc, errors, rows[i]);
        }
      }
      if (!errors.empty()) {
        return Response::json(422, errors.body());
      }
    }
    auto models = store_.current();
    if (!models->ready()) {
      if (strict) {
        return Response::detail(503, "Models not ready");
      }
      return not_ready_bulk(rows, started);
    }
    const Predicted p = predict_rows(*models, rows);
    const std::string meta = prediction_meta(*models);
    fmt::memory_buffer out;
    out.append(std::string_view("{\"predictions\":["));
    for (std::size_t i = 0; i < rows.size(); ++i) {
      if (i > 0) {
        out.push_back(',');
      }
      write_prediction(out, p.ttft[i], p.tpot[i], p.ttft_expected[i], p.tpot_expected[i], meta);
    }
    fmt::format_to(std::back_inserter(out),
                   "],\"total_requests\":{0},\"successful_predictions\":{0},"
                   "\"failed_predictions\":0,{1}\"processing_time_ms\":{2}}}",
                   rows.size(), strict ? "" : "\"errors\":[],", elapsed_ms(started));
    return Response::text(200, fmt::to_string(out), "application/json");
  }

  // Ours, additive (predictor-api.md section 4): the rows as columns, the answer as columns,
  // the model metadata once. The same validation (422), readiness (503) and numbers, written
  // the same way, as /predict/bulk/strict.
  Response columnar(Request& req) {
    const auto started = Clock::now();
    thread_local std::vector<features::FeatureInput> rows;
    ColumnsTooLong too_long;
    if (!parse_columns_fast(req.body, info_.max_bulk_rows, rows, &too_long)) {
      json::Errors errors;
      if (too_long.rows > 0) {  // counted by the fast parser: no document of a refused body
        json::add_too_long(json::Loc(), too_long.field, info_.max_bulk_rows, too_long.rows, errors);
        return Response::json(422, errors.body());
      }
      auto body = json::parse_body(req.body, errors);
      json::Loc loc;
      if (!body || !json::expect_object(*body, loc, errors) ||
          !features::read_feature_columns(*body, loc, errors, info_.max_bulk_rows, rows)) {
        return Response::json(422, errors.body());
      }
    }
    auto models = store_.current();
    if (!models->ready()) {
      return Response::detail(503, "Models not ready");
    }
    const Predicted p = predict_rows(*models, rows);
    fmt::memory_buffer out;
    const auto column = [&](std::string_view key, const std::vector<double>& values,
                            const std::vector<double>* bounds) {
      out.append(key);
      for (std::size_t i = 0; i < rows.size(); ++i) {
        if (i > 0) {
          out.push_back(',');
        }
        if (bounds == nullptr) {
          // The strict answer's "{}", compiled: the same text without parsing a format string
          // per value (a few % of the predictor's CPU at 100 rows).
          fmt::format_to(std::back_inserter(out), FMT_COMPILE("{}"), values[i]);
        } else {
          append_ms(out, std::min(values[i], (*bounds)[i]));
        }
      }
      out.push_back(']');
    };
    column("{\"ttft_ms\":[", p.ttft, nullptr);
    column(",\"tpot_ms\":[", p.tpot, nullptr);
    column(",\"ttft_expected_ms\":[", p.ttft_expected, &p.ttft);
    column(",\"tpot_expected_ms\":[", p.tpot_expected, &p.tpot);
    out.push_back(',');
    out.append(prediction_meta(*models));
    fmt::format_to(std::back_inserter(out), ",\"processing_time_ms\":{}}}", elapsed_ms(started));
    return Response::text(200, fmt::to_string(out), "application/json");
  }

  Response status(Request&) {
    auto m = store_.current();
    Json exist = Json::object();
    for (const char* name : kSyncedModels) {
      exist[name] = m->versions.count(name) > 0;
    }
    return Response::json(200, Json{{"is_ready", m->ready()},
                                    {"model_type", "xgboost"},
                                    {"objective_type", info_.objective_type},
                                    {"quantile", info_.quantile},
                                    {"last_model_load", last_load(*m)},
                                    {"training_server_url", info_.training_server_url},
                                    {"models_exist", exist},
                                    {"model_versions", m->versions},
                                    {"model_generations", m->generations},
                                    {"ensemble_active", m->ensemble_active()}});
  }

  // The answer to POST /reload once the sync thread has synced (predictor-api.md: 200 with
  // synced/loaded/is_ready/..., 500 when nothing could be loaded).
  Response reload_response(const SyncResult& r) {
    auto m = store_.current();
    Json body = {{"synced", r.synced},
                 {"loaded", r.loaded > 0 || m->ready()},
                 {"is_ready", m->ready()},
                 {"model_type", "xgboost"},
                 {"objective_type", info_.objective_type},
                 {"quantile", info_.quantile},
                 {"last_load_time", last_load(*m)}};
    if (!r.synced) {
      body["error"] = r.error;
      if (!m->ready()) {
        return Response::json(500, Json{{"detail", "Reload failed: " + r.error}});
      }
    }
    return Response::json(200, body);
  }

  Response readyz(Request&) {
    if (!store_.current()->ready()) {
      return Response::detail(503, "Models are not ready");
    }
    return Response::json(200, Json{{"status", "ready"},
                                    {"model_type", "xgboost"},
                                    {"objective_type", info_.objective_type},
                                    {"quantile", info_.quantile}});
  }

  Response root(Request&) {
    return Response::json(200, Json{{"message", "Latency Predictor Prediction Server"},
                                    {"model_type", "xgboost"},
                                    {"objective_type", info_.objective_type},
                                    {"quantile", info_.quantile},
                                    {"is_ready", store_.current()->ready()},
                                    {"sync_interval", info_.sync_interval_sec},
                                    {"training_server", info_.training_server_url}});
  }

 private:
  static double elapsed_ms(Clock::time_point start) {
    return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  }

  static Json last_load(const ServingModels& m) {
    return m.last_load ? Json(util::format_rfc3339(*m.last_load)) : Json(nullptr);
  }

  // The model metadata of every prediction (members, no braces), serialised once per request.
  std::string prediction_meta(const ServingModels& m) const {
    return fmt::format(
        "\"predicted_at\":\"{}\",\"model_type\":\"xgboost\",\"objective_type\":\"{}\","
        "\"quantile\":{},\"last_model_load\":{}",
        util::now_rfc3339(), info_.objective_type, info_.quantile, last_load(m).dump());
  }

  // Both targets' outputs and central estimates for every row (thread-local buffers, valid
  // until the thread's next call).
  struct Predicted {
    const std::vector<double>& ttft;
    const std::vector<double>& tpot;
    const std::vector<double>& ttft_expected;
    const std::vector<double>& tpot_expected;
  };
  Predicted predict_rows(const ServingModels& models,
                         const std::vector<features::FeatureInput>& rows) {
    thread_local std::vector<double> ttft, tpot, ttft_expected, tpot_expected;
    ttft.resize(rows.size());
    tpot.resize(rows.size());
    ttft_expected.resize(rows.size());
    tpot_expected.resize(rows.size());
    models.ttft.predict_batch(rows.data(), rows.size(), ttft.data(), ttft_expected.data());
    models.tpot.predict_batch(rows.data(), rows.size(), tpot.data(), tpot_expected.data());
    rows_.Increment(static_cast<double>(rows.size()));
    return {ttft, tpot, ttft_expected, tpot_expected};
  }

  // ttft_ms / tpot_ms: the model's output (its quantile under the quantile objective), as the
  // reference, in full precision (they equal the trainer's bit for bit). Ours adds the central
  // estimates (the median under the quantile objective), what live error is measured against
  // (clients ignore unknown keys). Those need no round trip: microsecond resolution, rounded
  // down so an estimate never exceeds its bound, written without the float formatter (which
  // was a tenth of the predictor's CPU under load with four doubles per row).
  static void write_prediction(fmt::memory_buffer& out, double ttft, double tpot,
                               double ttft_expected, double tpot_expected,
                               const std::string& meta) {
    fmt::format_to(std::back_inserter(out), "{{\"ttft_ms\":{},\"tpot_ms\":{}", ttft, tpot);
    out.append(std::string_view(",\"ttft_expected_ms\":"));
    append_ms(out, std::min(ttft_expected, ttft));
    out.append(std::string_view(",\"tpot_expected_ms\":"));
    append_ms(out, std::min(tpot_expected, tpot));
    out.push_back(',');
    out.append(meta);
    out.push_back('}');
  }

  static void append_ms(fmt::memory_buffer& out, double ms) {
    const double clamped = std::isfinite(ms) ? std::clamp(ms, 0.0, 1e12) : 0.0;
    const auto us = static_cast<int64_t>(std::floor(clamped * 1000.0));
    const fmt::format_int whole(us / 1000);
    out.append(whole.data(), whole.data() + whole.size());
    const auto frac = static_cast<int>(us % 1000);
    const char tail[4] = {'.', static_cast<char>('0' + frac / 100),
                          static_cast<char>('0' + frac / 10 % 10),
                          static_cast<char>('0' + frac % 10)};
    out.append(tail, tail + 4);
  }

  Response not_ready_bulk(const std::vector<features::FeatureInput>& rows,
                          Clock::time_point started) {
    Json predictions = Json::array();
    Json errors = Json::array();
    for (std::size_t i = 0; i < rows.size(); ++i) {
      predictions.push_back(nullptr);
      errors.push_back(Json{{"index", i},
                            {"error", "Models not ready"},
                            {"request", features::feature_input_to_json(rows[i])}});
    }
    return Response::json(200, Json{{"predictions", predictions},
                                    {"errors", errors},
                                    {"total_requests", rows.size()},
                                    {"successful_predictions", 0},
                                    {"failed_predictions", rows.size()},
                                    {"processing_time_ms", elapsed_ms(started)}});
  }

  ModelStore& store_;
  ModelSync& sync_;
  PredictorInfo info_;
  prometheus::Counter& rows_;
};

http::Router make_router(const std::shared_ptr<Handlers>& h, prometheus::Registry& registry);

}  // namespace

PredictorHttp make_predictor_http(ModelStore& store, ModelSync& sync, const PredictorInfo& info,
                                  prometheus::Registry& registry) {
  auto h = std::make_shared<Handlers>(store, sync, info, registry);
  PredictorHttp out;
  out.router = make_router(h, registry);
  auto router = std::make_shared<http::Router>(out.router);
  out.handler = [h, router, &sync, token = info.admin_token](http::Request&& req,
                                                             http::ResponseStreamPtr stream) {
    if (req.method == "POST" && req.path == "/reload") {
      if (auto refused = http::require_bearer(token, req)) {
        return stream->respond(*refused);
      }
      // The sync thread fetches now; the answer leaves from there (respond() is thread-safe).
      sync.request_sync([h, stream](SyncResult r) { stream->respond(h->reload_response(r)); });
      return;
    }
    stream->respond(router->route(req));
  };
  return out;
}

namespace {

http::Router make_router(const std::shared_ptr<Handlers>& h, prometheus::Registry& registry) {
  metrics::HttpMetrics m(registry, "llmd_predictor");
  http::Router r;
  auto add = [&](const char* method, const char* path, auto fn) {
    m.add(r, method, path, [h, fn](Request& req) { return fn(*h, req); });
  };
  add("POST", "/predict", [](Handlers& x, Request& q) { return x.predict(q); });
  add("POST", "/predict/bulk", [](Handlers& x, Request& q) { return x.bulk(q, false); });
  add("POST", "/predict/bulk/strict", [](Handlers& x, Request& q) { return x.bulk(q, true); });
  add("POST", "/predict/bulk/columnar", [](Handlers& x, Request& q) { return x.columnar(q); });
  add("GET", "/status", [](Handlers& x, Request& q) { return x.status(q); });
  // POST /reload is answered by the handler make_predictor_http() builds (not on this router:
  // it waits for the sync thread without holding an I/O thread); the router only names it,
  // so a GET gets 405.
  r.add("POST", "/reload", [](Request&) {
    return Response::detail(500, "POST /reload is served by the asynchronous handler");
  });
  add("GET", "/healthz", [](Handlers&, Request&) {
    return Response::json(200, Json{{"status", "ok"}, {"service", "latency-predictor"}});
  });
  add("GET", "/readyz", [](Handlers& x, Request& q) { return x.readyz(q); });
  add("GET", "/", [](Handlers& x, Request& q) { return x.root(q); });
  r.add("GET", "/metrics", [&registry](Request&) {
    return Response::text(200, metrics::serialize(registry), metrics::kContentType);
  });
  return r;
}

}  // namespace

}  // namespace llmd::predictor
