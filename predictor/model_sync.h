#pragma once
// Keeps the predictor's models in step with the trainer: polls GET /model/{name}/info, downloads
// what should_take() says is new, checks the byte count and that the model compiles, writes the
// local copy atomically and swaps it into the ModelStore. Any failure keeps the current model.
//
// Threading: syncs run on the sync thread only (periodic, and at once on request_sync()), so
// no request-serving thread waits for the trainer; sync_once() (serialised by `mu_`) is also
// called by tests. Each HTTP call is bounded by `timeout`, and a round stops at the first call
// the trainer does not answer, so one round takes at most a few timeouts.
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

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

// What the trainer's GET /model/{name}/info says about one published file.
struct ModelIdentity {
  int64_t version = 0;
  std::string last_modified;
  // The trainer's model lineage: kept across its restarts, new when it starts without its model
  // state (its versions then count from 1 again). "" from trainers that publish none (the
  // reference one) and for local copies loaded at start (lineage unknown).
  std::string generation;
};

// The rule for taking a published file, given what the predictor holds (null: nothing).
// - Both sides name a generation: take it when the generation differs, whatever the version
//   (a predictor holding version 28 of the old lineage takes version 1 of the new one), or,
//   within one generation, when the version differs (the trainer's file is the truth).
// - Otherwise (a trainer without generations, or a local copy loaded at start): take any change
//   of version or file time.
bool should_take(const ModelIdentity* held, const ModelIdentity& remote);

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
  // /reload: the sync thread syncs now and calls `done` with the result (on that thread).
  // Without a trainer (or before start()) `done` runs at once with a local-only result.
  void request_sync(std::function<void(SyncResult)> done);
  void start();
  void stop();
  const SyncConfig& config() const { return config_; }

 private:
  struct Metrics;
  enum class Outcome { kOk, kFailed, kUnreachable };  // kUnreachable: a call got no answer
  Outcome sync_model(const std::string& name, std::string& error);

  SyncConfig config_;
  ModelStore& store_;
  std::unique_ptr<Metrics> metrics_;
  std::mutex mu_;
  std::map<std::string, ModelIdentity> seen_;  // guarded by mu_
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;                                 // guarded by stop_mu_
  bool kicked_ = false;                                   // guarded by stop_mu_
  std::vector<std::function<void(SyncResult)>> waiting_;  // guarded by stop_mu_
  std::thread thread_;
};

}  // namespace llmd::predictor
