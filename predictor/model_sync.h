#pragma once
// Keeps the predictor's models in step with the trainer: polls GET /model/{name}/info, downloads
// only newer versions, checks the byte count and that the model compiles, writes the local copy
// atomically and swaps it into the ModelStore. Any failure keeps the current model.
//
// Threading: sync_once() is serialised by `mu_` (the periodic thread and /reload may race); it
// makes blocking HTTP calls, bounded by `timeout`.
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "predictor/model_store.h"

namespace prometheus {
class Registry;
}

namespace llmd::predictor {

struct SyncConfig {
  std::string trainer_url;  // empty = no sync, local files only
  double interval_sec = 10;
  std::chrono::milliseconds timeout{5000};
  std::map<std::string, std::string> local_paths;  // name -> file
};

struct SyncResult {
  bool synced = false;  // every info call answered
  int loaded = 0;       // models installed by this sync
  std::string error;
};

class ModelSync {
 public:
  ModelSync(SyncConfig config, ModelStore& store, prometheus::Registry& registry);
  ~ModelSync();

  // Loads models already in the local directory (ready without the trainer).
  void load_local();
  SyncResult sync_once();
  void start();
  void stop();
  const SyncConfig& config() const { return config_; }

 private:
  struct Metrics;
  struct Seen {
    int64_t version = 0;
    std::string last_modified;
  };
  bool sync_model(const std::string& name, std::string& error);

  SyncConfig config_;
  ModelStore& store_;
  std::unique_ptr<Metrics> metrics_;
  std::mutex mu_;
  std::map<std::string, Seen> seen_;  // guarded by mu_
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace llmd::predictor
