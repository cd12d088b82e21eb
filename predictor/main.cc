// Predictor executable: flags -> ModelStore + ModelSync + router -> HttpServer.
#include <prometheus/registry.h>

#include <iostream>
#include <thread>

#include <spdlog/spdlog.h>

#include "common/config/logging.h"
#include "common/config/options.h"
#include "common/config/reference_env.h"
#include "common/http/client.h"
#include "common/http/server.h"
#include "common/http/server_flags.h"
#include "common/model/latency_model.h"
#include "common/util/memory.h"
#include "predictor/model_store.h"
#include "predictor/model_sync.h"
#include "predictor/routes.h"

using namespace llmd;

namespace {

int run(int argc, char** argv) {
  config::Options o("predictor", "Latency prediction server (batched TTFT/TPOT predictions)");
  o.add("host", "PREDICT_HOST", "0.0.0.0",
        "Address to listen on: 0.0.0.0 as the reference sidecars bind (in a pod the kubelet "
        "probes the pod IP); 127.0.0.1 keeps a local run on loopback");
  o.add("admin-token", "LLMD_ADMIN_TOKEN", "",
        "Bearer token required on POST /reload (empty: none)");
  o.add("port", "PREDICT_PORT", "8001", "Port to listen on");
  o.add("training-server-url", "TRAINING_SERVER_URL", "http://127.0.0.1:8000",
        "Trainer to sync models from (empty = local models only)");
  o.add("model-sync-interval", "MODEL_SYNC_INTERVAL_SEC", "10", "Seconds between model syncs");
  o.add("model-sync-timeout", "MODEL_SYNC_TIMEOUT_SEC", "5",
        "Seconds each call to the trainer may take (connect, send, answer); a sync round stops at "
        "the first call that times out",
        {"HTTP_TIMEOUT"});
  o.add("local-ttft-model-path", "LOCAL_TTFT_MODEL_PATH", "/tmp/prediction_models/ttft.ubj",
        "Local copy of the TTFT model");
  o.add("local-tpot-model-path", "LOCAL_TPOT_MODEL_PATH", "/tmp/prediction_models/tpot.ubj",
        "Local copy of the TPOT model");
  o.add("local-ttft-gated-model-path", "LOCAL_TTFT_GATED_MODEL_PATH",
        "/tmp/prediction_models/ttft_gated.bin", "Local copy of the TTFT ensemble");
  o.add("local-tpot-gated-model-path", "LOCAL_TPOT_GATED_MODEL_PATH",
        "/tmp/prediction_models/tpot_gated.bin", "Local copy of the TPOT ensemble");
  o.add("model-type", "LATENCY_MODEL_TYPE", "xgboost", "Must be xgboost");
  o.add("objective-type", "LATENCY_OBJECTIVE_TYPE", "quantile",
        "Reported objective (must match the trainer)");
  o.add("quantile-alpha", "LATENCY_QUANTILE_ALPHA", "0.9",
        "Reported quantile (must match the trainer)");
  o.add("workers", "PREDICT_WORKERS",
        std::to_string(std::max(1u, std::thread::hardware_concurrency())),
        "HTTP worker threads (default = cores; the reference's uvicorn worker processes become "
        "threads of this one predictor)",
        {"UVICORN_WORKERS"});
  http::add_server_limit_flags(o, "PREDICT_");
  o.add("max-bulk-rows", "PREDICT_MAX_BULK_ROWS", "10000", "Most rows per bulk request");
  o.add("log-level", "LOG_LEVEL", "info", "trace | debug | info | warn | error");
  if (!o.parse(argc, argv)) {
    return 0;
  }
  config::init_logging(o.str("log-level"), "predictor");
  config::log_reference_env(config::predictor_reference_env(), o.env_names());
  if (o.str("model-type") != "xgboost") {
    throw std::invalid_argument("--model-type / LATENCY_MODEL_TYPE: '" + o.str("model-type") +
                                "' is not implemented; this predictor serves xgboost models");
  }
  if (!model::parse_objective(o.str("objective-type"))) {
    throw std::invalid_argument(
        "--objective-type / LATENCY_OBJECTIVE_TYPE: expected quantile or mean");
  }
  const std::string url = o.str("training-server-url");
  if (!url.empty() && !http::parse_url(url)) {
    throw std::invalid_argument(
        "--training-server-url / TRAINING_SERVER_URL: expected "
        "http://host:port, got '" +
        url + "'");
  }
  predictor::SyncConfig sync_cfg;
  sync_cfg.trainer_url = url;
  sync_cfg.interval_sec = o.number("model-sync-interval", 0.05, 86400);
  sync_cfg.timeout = std::chrono::milliseconds(
      static_cast<int64_t>(o.number("model-sync-timeout", 0.1, 3600) * 1000));
  sync_cfg.local_paths = {{"ttft", o.str("local-ttft-model-path")},
                          {"tpot", o.str("local-tpot-model-path")},
                          {"ttft_gated", o.str("local-ttft-gated-model-path")},
                          {"tpot_gated", o.str("local-tpot-gated-model-path")}};
  predictor::PredictorInfo info;
  info.objective_type = o.str("objective-type");
  info.quantile = o.number("quantile-alpha", 0.01, 0.99);
  info.sync_interval_sec = sync_cfg.interval_sec;
  info.training_server_url = url;
  info.max_bulk_rows = static_cast<std::size_t>(o.integer("max-bulk-rows", 1, 1000000));
  info.admin_token = o.str("admin-token");

  http::ServerOptions server_opts;
  server_opts.host = o.str("host");
  server_opts.port = static_cast<uint16_t>(o.integer("port", 0, 65535));
  server_opts.io_threads = static_cast<int>(o.integer("workers", 1, 256));
  http::apply_server_limit_flags(o, server_opts);
  server_opts.server_name = "llmd-predictor";
  server_opts.thread_name = "predictor-io";

  prometheus::Registry registry;
  predictor::ModelStore store;
  predictor::ModelSync sync(sync_cfg, store, registry);
  sync.load_local();
  predictor::PredictorHttp api = predictor::make_predictor_http(store, sync, info, registry);
  http::HttpServer server(server_opts, api.handler);
  server.on_shutdown([&sync] { sync.stop(); });
  server.start();
  sync.start();
  spdlog::info("predictor listening on {}:{} with {} workers (trainer {}, ready {})",
               server_opts.host, server.port(), server_opts.io_threads, url.empty() ? "none" : url,
               store.current()->ready());
  if (info.admin_token.empty() && !http::is_loopback_host(server_opts.host)) {
    spdlog::warn("no --admin-token: whoever reaches {} may POST /reload", server_opts.host);
  }
  server.run(true);
  sync.stop();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  llmd::util::return_large_blocks_to_the_system();
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "predictor: " << e.what() << std::endl;
    return 2;
  }
}
