#include "predictor/model_sync.h"

#include "common/util/thread_name.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <filesystem>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/http/client.h"
#include "common/util/files.h"

namespace llmd::predictor {

struct ModelSync::Metrics {
  explicit Metrics(prometheus::Registry& r)
      : syncs(prometheus::BuildCounter()
                  .Name("llmd_predictor_model_sync_total")
                  .Help("Model sync rounds by result")
                  .Register(r)),
        sync_ok(syncs.Add({{"result", "ok"}})),
        sync_error(syncs.Add({{"result", "error"}})),
        last_ok(prometheus::BuildGauge()
                    .Name("llmd_predictor_model_sync_last_success_timestamp_seconds")
                    .Help("Unix time of the last sync round in which the trainer answered")
                    .Register(r)
                    .Add({})),
        last_result(prometheus::BuildGauge()
                        .Name("llmd_predictor_model_sync_last_result")
                        .Help("1 when the last sync round succeeded, 0 when it failed")
                        .Register(r)
                        .Add({})),
        versions(prometheus::BuildGauge()
                     .Name("llmd_predictor_model_version")
                     .Help("Version of the installed model file")
                     .Register(r)) {}
  prometheus::Family<prometheus::Counter>& syncs;
  prometheus::Counter& sync_ok;
  prometheus::Counter& sync_error;
  prometheus::Gauge& last_ok;
  prometheus::Gauge& last_result;
  prometheus::Family<prometheus::Gauge>& versions;
};

ModelSync::ModelSync(SyncConfig config, ModelStore& store, prometheus::Registry& registry)
    : config_(std::move(config)), store_(store), metrics_(std::make_unique<Metrics>(registry)) {}

ModelSync::~ModelSync() {
  stop();
}

void ModelSync::load_local() {
  std::lock_guard lock(mu_);
  for (const char* name : kSyncedModels) {
    auto it = config_.local_paths.find(name);
    if (it == config_.local_paths.end()) {
      continue;
    }
    auto bytes = util::read_file(it->second);
    if (!bytes) {
      continue;
    }
    try {
      auto file = compile_model_file(name, *bytes);
      store_.install(name, file);
      seen_[name] = ModelIdentity{file.version, "", ""};  // lineage unknown
      metrics_->versions.Add({{"model", name}}).Set(static_cast<double>(file.version));
      spdlog::info("loaded local {} model from {} (version {})", name, it->second, file.version);
    } catch (const std::exception& e) {
      spdlog::error("ignoring local {} model {}: {}", name, it->second, e.what());
    }
  }
}

bool should_take(const ModelIdentity* held, const ModelIdentity& remote) {
  if (held == nullptr) {
    return true;
  }
  if (!held->generation.empty() && !remote.generation.empty()) {
    return remote.generation != held->generation || remote.version != held->version;
  }
  return remote.version != held->version || remote.last_modified != held->last_modified;
}

ModelSync::Outcome ModelSync::sync_model(const std::string& name, std::string& error) {
  auto url = http::parse_url(config_.trainer_url);
  http::HttpClient client(url->host, url->port, config_.timeout);
  auto info = client.get(url->base_path + "/model/" + name + "/info");
  if (info.status == 404) {
    // The trainer has no such file (e.g. the ensemble turned inactive): drop our copy.
    if (name.ends_with("_gated") && seen_.count(name) > 0) {
      store_.remove(name);
      seen_.erase(name);
      std::error_code ec;
      std::filesystem::remove(config_.local_paths[name], ec);
      spdlog::info("{} model no longer published: removed", name);
    }
    return Outcome::kOk;
  }
  if (info.status != 200) {
    error = "GET /model/" + name + "/info -> " +
            (info.status == 0 ? info.error : std::to_string(info.status));
    return info.status == 0 ? Outcome::kUnreachable : Outcome::kFailed;
  }
  ModelIdentity remote;
  std::size_t expected_size = 0;
  try {
    auto j = nlohmann::json::parse(info.body);
    remote.version = j.value("version", int64_t{0});
    remote.last_modified = j.value("last_modified", "");
    remote.generation = j.value("generation", "");
    expected_size = j.at("size_bytes").get<std::size_t>();
  } catch (const std::exception& e) {
    error = "bad info for " + name + ": " + e.what();
    return Outcome::kFailed;
  }
  auto it = seen_.find(name);
  const ModelIdentity* held = it == seen_.end() ? nullptr : &it->second;
  if (!should_take(held, remote)) {
    return Outcome::kOk;
  }
  if (held != nullptr && !held->generation.empty() && !remote.generation.empty() &&
      remote.generation != held->generation) {
    spdlog::info("{} model: trainer generation {} -> {} (version {} -> {}): taking it", name,
                 held->generation, remote.generation, held->version, remote.version);
  } else if (held != nullptr && remote.version < held->version) {
    spdlog::warn("{} model version went back from {} to {}: taking it", name, held->version,
                 remote.version);
  }
  auto dl = client.get(url->base_path + "/model/" + name + "/download");
  if (dl.status != 200) {
    error =
        "download of " + name + " -> " + (dl.status == 0 ? dl.error : std::to_string(dl.status));
    return dl.status == 0 ? Outcome::kUnreachable : Outcome::kFailed;
  }
  std::string_view length = dl.header("content-length");
  if (!length.empty() && std::to_string(dl.body.size()) != length) {
    error = "download of " + name + " is truncated";
    return Outcome::kFailed;
  }
  if (dl.body.size() != expected_size) {
    // Published again between info and download: take it next round.
    error = "size of " + name + " changed during download";
    return Outcome::kFailed;
  }
  CompiledFile file;
  try {
    file = compile_model_file(name, dl.body);
  } catch (const std::exception& e) {
    error = "downloaded " + name + " does not load: " + e.what();
    return Outcome::kFailed;
  }
  auto path = config_.local_paths.find(name);
  if (path != config_.local_paths.end()) {
    try {
      util::write_file_atomic(path->second, dl.body);
    } catch (const std::exception& e) {
      spdlog::warn("could not keep a local copy of {}: {}", name, e.what());
    }
  }
  file.generation = remote.generation;
  store_.install(name, file);
  seen_[name] = remote;
  metrics_->versions.Add({{"model", name}}).Set(static_cast<double>(file.version));
  spdlog::info("installed {} model version {} ({} bytes{})", name, file.version, dl.body.size(),
               remote.generation.empty() ? "" : ", generation " + remote.generation);
  return Outcome::kOk;
}

SyncResult ModelSync::sync_once() {
  SyncResult result;
  if (config_.trainer_url.empty() || !http::parse_url(config_.trainer_url)) {
    result.error = "no valid training server URL configured";
    return result;
  }
  std::lock_guard lock(mu_);
  auto before = store_.current()->versions;
  result.synced = true;
  for (const char* name : kSyncedModels) {
    std::string error;
    const Outcome outcome = sync_model(name, error);
    if (outcome != Outcome::kOk) {
      result.synced = false;
      result.error = error;
    }
    if (outcome == Outcome::kUnreachable) {
      break;  // no answer (down, or hanging): neither wait nor hammer it for the other files
    }
  }
  auto after = store_.current()->versions;
  for (const auto& [name, v] : after) {
    auto it = before.find(name);
    result.loaded += (it == before.end() || it->second != v) ? 1 : 0;
  }
  if (result.synced) {
    metrics_->sync_ok.Increment();
    metrics_->last_result.Set(1);
    metrics_->last_ok.SetToCurrentTime();
  } else {
    metrics_->sync_error.Increment();
    metrics_->last_result.Set(0);
    spdlog::warn("model sync failed, keeping current models: {}", result.error);
  }
  return result;
}

void ModelSync::start() {
  if (config_.trainer_url.empty()) {
    spdlog::warn("no training server URL: serving local models only");
    return;
  }
  thread_ = named_thread("model-sync", [this] {
    const auto interval = std::chrono::duration<double>(config_.interval_sec);
    std::unique_lock lock(stop_mu_);
    while (!stopping_) {
      std::vector<std::function<void(SyncResult)>> waiting;
      waiting.swap(waiting_);
      kicked_ = false;
      lock.unlock();
      SyncResult result = sync_once();
      for (auto& done : waiting) {
        done(result);
      }
      lock.lock();
      stop_cv_.wait_for(lock, interval, [this] { return stopping_ || kicked_; });
    }
    std::vector<std::function<void(SyncResult)>> waiting;
    waiting.swap(waiting_);
    lock.unlock();
    for (auto& done : waiting) {
      done(SyncResult{false, 0, "predictor is shutting down"});
    }
  });
}

void ModelSync::request_sync(std::function<void(SyncResult)> done) {
  {
    std::lock_guard lock(stop_mu_);
    if (thread_.joinable() && !stopping_) {
      waiting_.push_back(std::move(done));
      kicked_ = true;
      stop_cv_.notify_all();
      return;
    }
  }
  // No sync thread (no trainer configured, or stopping): nothing to wait for on the network.
  if (config_.trainer_url.empty()) {
    done(SyncResult{false, 0, "no training server configured"});
  } else {
    done(SyncResult{false, 0, "model sync is not running"});
  }
}

void ModelSync::stop() {
  {
    std::lock_guard lock(stop_mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) {
    thread_.join();
  }
}

}  // namespace llmd::predictor
