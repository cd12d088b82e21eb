// Trainer executable: flags -> TrainerService + router -> HttpServer. All logic lives in the
// library so tests and benchmarks run it in-process.
#include <prometheus/registry.h>

#include <csignal>

#include <iostream>
#include <thread>

#include <spdlog/spdlog.h>

#include "common/config/logging.h"
#include "common/config/options.h"
#include "common/config/reference_env.h"
#include "common/http/server.h"
#include "common/http/server_flags.h"
#include "common/util/memory.h"
#include "trainer/routes.h"
#include "trainer/trainer_service.h"

using namespace llmd;

namespace {

void add_options(config::Options& o) {
  o.add("host", "TRAINING_HOST", "0.0.0.0",
        "Address to listen on: 0.0.0.0 as the reference sidecars bind (in a pod the kubelet "
        "probes the pod IP); 127.0.0.1 keeps a local run on loopback");
  o.add("admin-token", "LLMD_ADMIN_TOKEN", "",
        "Bearer token required on /add_training_data_bulk, /flush and /model/export (empty: none)");
  o.add("port", "TRAINING_PORT", "8000", "Port to listen on");
  o.add("io-threads", "TRAINING_IO_THREADS", "2",
        "HTTP io threads (the reference's uvicorn worker processes become threads of this one "
        "trainer)",
        {"UVICORN_WORKERS"});
  o.add("retraining-interval", "LATENCY_RETRAINING_INTERVAL_SEC", "10",
        "Seconds between retraining checks (a fit runs only when new samples arrived)");
  o.add("min-samples-for-retrain", "LATENCY_MIN_SAMPLES_FOR_RETRAIN", "100",
        "Minimum training samples of a target before it is fitted");
  o.add("max-training-data-size-per-bucket", "LATENCY_MAX_TRAINING_DATA_SIZE_PER_BUCKET", "500",
        "FIFO window per (queue, cache, prefix) bucket");
  o.add("test-train-ratio", "LATENCY_TEST_TRAIN_RATIO", "0.1",
        "Share of entries held out for evaluation");
  o.add("max-test-data-size", "LATENCY_MAX_TEST_DATA_SIZE", "1000",
        "Hold-out FIFO size per target");
  o.add("model-type", "LATENCY_MODEL_TYPE", "xgboost",
        "xgboost (bayesian_ridge and lightgbm are not implemented and are refused)");
  o.add("quantile-alpha", "LATENCY_QUANTILE_ALPHA", "0.9", "Quantile of the quantile objective");
  o.add("objective-type", "LATENCY_OBJECTIVE_TYPE", "quantile", "quantile | mean");
  o.add("durable-ingest", "LATENCY_DURABLE_INGEST", "true",
        "Log and fsync every ingested batch before the 202 (<samples-path>.log), so acknowledged "
        "samples survive a crash");
  o.add("linear-base", "LATENCY_LINEAR_BASE", "true",
        "Fit trees on top of a sign-constrained linear estimate (ranks pods, extrapolates load)");
  o.add("ensemble-mode", "LATENCY_ENSEMBLE_MODE", "true",
        "Also fit noqueue/queued sub-models when both splits are large enough");
  o.add("min-samples-for-ensemble-split", "LATENCY_MIN_SAMPLES_FOR_ENSEMBLE_SPLIT", "200",
        "Minimum samples in each split before the ensemble is fitted");
  o.add("ttft-model-path", "LATENCY_TTFT_MODEL_PATH", "/tmp/latency_models/ttft.ubj",
        "TTFT model file");
  o.add("tpot-model-path", "LATENCY_TPOT_MODEL_PATH", "/tmp/latency_models/tpot.ubj",
        "TPOT model file");
  o.add("ttft-gated-model-path", "LATENCY_TTFT_GATED_MODEL_PATH",
        "/tmp/latency_models/ttft_gated.bin", "TTFT ensemble model file");
  o.add("tpot-gated-model-path", "LATENCY_TPOT_GATED_MODEL_PATH",
        "/tmp/latency_models/tpot_gated.bin", "TPOT ensemble model file");
  o.add("samples-path", "LATENCY_SAMPLES_PATH", "",
        "Sample snapshot file (default: training_samples.bin next to the TTFT model)");
  o.add("snapshot-interval", "LATENCY_SNAPSHOT_INTERVAL_SEC", "10",
        "Seconds between sample snapshots");
  o.add("n-estimators", "LATENCY_XGB_N_ESTIMATORS", "200", "Trees per model");
  o.add("max-depth", "LATENCY_XGB_MAX_DEPTH", "6", "Tree depth");
  o.add("learning-rate", "LATENCY_XGB_LEARNING_RATE", "0.05", "Shrinkage per tree");
  o.add("fit-threads", "LATENCY_FIT_THREADS",
        std::to_string(std::max(1u, std::thread::hardware_concurrency())),
        "Threads per XGBoost fit");
  http::add_server_limit_flags(o, "LATENCY_");
  o.add("max-bulk-entries", "LATENCY_MAX_BULK_ENTRIES", "100000",
        "Most entries per /add_training_data_bulk");
  o.add("log-level", "LOG_LEVEL", "info", "trace | debug | info | warn | error");
}

int run(int argc, char** argv) {
  config::Options o("trainer", "Latency model training server (TTFT/TPOT XGBoost models)");
  add_options(o);
  if (!o.parse(argc, argv)) {
    return 0;
  }
  config::init_logging(o.str("log-level"), "trainer");
  config::log_reference_env(config::trainer_reference_env(), o.env_names());
  if (o.str("model-type") != "xgboost") {
    throw std::invalid_argument("--model-type / LATENCY_MODEL_TYPE: '" + o.str("model-type") +
                                "' is not implemented; this trainer supports only xgboost");
  }
  auto objective = model::parse_objective(o.str("objective-type"));
  if (!objective) {
    throw std::invalid_argument(
        "--objective-type / LATENCY_OBJECTIVE_TYPE: expected quantile or "
        "mean, got '" +
        o.str("objective-type") + "'");
  }
  trainer::TrainerConfig cfg;
  cfg.retraining_interval_sec = o.number("retraining-interval", 0.01, 86400);
  cfg.min_samples_for_retrain = static_cast<std::size_t>(o.integer("min-samples-for-retrain", 1));
  cfg.store.max_per_bucket =
      static_cast<std::size_t>(o.integer("max-training-data-size-per-bucket", 1, 1000000));
  cfg.store.test_ratio = o.number("test-train-ratio", 0.0, 0.9);
  cfg.store.max_test_per_target =
      static_cast<std::size_t>(o.integer("max-test-data-size", 0, 10000000));
  cfg.objective = *objective;
  cfg.quantile_alpha = o.number("quantile-alpha", 0.01, 0.99);
  cfg.ensemble_mode = o.boolean("ensemble-mode");
  cfg.linear_base = o.boolean("linear-base");
  cfg.durable_ingest = o.boolean("durable-ingest");
  cfg.min_samples_for_split =
      static_cast<std::size_t>(o.integer("min-samples-for-ensemble-split", 1));
  cfg.ttft_model_path = o.str("ttft-model-path");
  cfg.tpot_model_path = o.str("tpot-model-path");
  cfg.ttft_gated_model_path = o.str("ttft-gated-model-path");
  cfg.tpot_gated_model_path = o.str("tpot-gated-model-path");
  cfg.samples_path = o.str("samples-path");
  cfg.snapshot_interval_sec = o.number("snapshot-interval", 0.1, 86400);
  cfg.params.num_trees = static_cast<int>(o.integer("n-estimators", 1, 5000));
  cfg.params.max_depth = static_cast<int>(o.integer("max-depth", 1, 16));
  cfg.params.learning_rate = o.number("learning-rate", 0.0001, 1.0);
  cfg.params.threads = static_cast<int>(o.integer("fit-threads", 1, 256));

  http::ServerOptions server_opts;
  server_opts.host = o.str("host");
  server_opts.port = static_cast<uint16_t>(o.integer("port", 0, 65535));
  server_opts.io_threads = static_cast<int>(o.integer("io-threads", 1, 64));
  http::apply_server_limit_flags(o, server_opts);
  server_opts.server_name = "llmd-trainer";
  server_opts.thread_name = "trainer-io";
  trainer::RouteLimits limits;
  limits.max_bulk_entries = static_cast<std::size_t>(o.integer("max-bulk-entries", 1));
  limits.admin_token = o.str("admin-token");

  prometheus::Registry registry;
  trainer::TrainerService service(cfg, registry);
  http::Router router = trainer::make_router(service, registry, limits);
  http::HttpServer server(server_opts, [&router](http::Request& r) { return router.route(r); });
  server.on_shutdown([&service] {
    spdlog::info("shutting down: stopping training and writing the final sample snapshot");
    service.stop_background();
  });
  server.start();
  service.start_background();
  spdlog::info("trainer listening on {}:{} (objective {}, alpha {}, ensemble {}, linear base {})",
               server_opts.host, server.port(), o.str("objective-type"), cfg.quantile_alpha,
               cfg.ensemble_mode, cfg.linear_base);
  if (limits.admin_token.empty() && !http::is_loopback_host(server_opts.host)) {
    spdlog::warn("no --admin-token: whoever reaches {} may post samples, /flush and export models",
                 server_opts.host);
  }
  server.run(true);
  service.stop_background();
  spdlog::info("trainer stopped");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // A file-size limit (RLIMIT_FSIZE) then fails the write with EFBIG, which the sample log
  // rolls back and answers with 503, instead of killing the trainer.
  std::signal(SIGXFSZ, SIG_IGN);
  llmd::util::return_large_blocks_to_the_system();
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "trainer: " << e.what() << std::endl;
    return 2;
  }
}
