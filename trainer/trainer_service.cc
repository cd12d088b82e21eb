#include "trainer/trainer_service.h"

#include "common/util/thread_name.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <chrono>
#include <random>
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/util/files.h"
#include "common/util/targz.h"
#include "trainer/persistence.h"

namespace llmd::trainer {
namespace {

// The /metrics summary of a published base model: gain importance, and for a model on a linear
// base its coefficients (ms per unit) and intercept; otherwise the booster's base score.
void describe(const model::TargetModel& m, PublishedModels& out, int target) {
  const auto columns = model::column_info(m.feature_set());
  // Every column gets a line, 0 where no split or coefficient uses it: clients look features
  // up by name (the reference's scikit-style importances list every feature).
  const auto gains = m.booster().gain_importance(columns);
  out.importance[target].clear();
  for (const auto& name : columns.names) {
    double gain = 0.0;
    for (const auto& [feature, g] : gains) {
      gain = feature == name ? g : gain;
    }
    out.importance[target].emplace_back(name, gain);
  }
  out.coef[target].clear();
  if (const auto& base = m.linear_base()) {
    out.intercept[target] = base->intercept;
    for (std::size_t c = 0; c < base->coef.size() && c < columns.names.size(); ++c) {
      out.coef[target].emplace_back(columns.names[c], base->coef[c]);
    }
  } else {
    out.intercept[target] = m.base_score();
  }
}

using features::FeatureSet;
using Clock = std::chrono::steady_clock;

FeatureSet base_set(Target t) {
  return t == Target::kTtft ? FeatureSet::kTtft : FeatureSet::kTpot;
}
FeatureSet noqueue_set(Target t) {
  return t == Target::kTtft ? FeatureSet::kTtftNoQueue : FeatureSet::kTpotNoQueue;
}

ModelFile make_file(std::string bytes, int64_t version) {
  return ModelFile{std::make_shared<const std::string>(std::move(bytes)), version,
                   std::chrono::system_clock::now()};
}

}  // namespace

struct TrainerService::Metrics {
  explicit Metrics(prometheus::Registry& r)
      : ingested(prometheus::BuildCounter()
                     .Name("llmd_trainer_samples_ingested_total")
                     .Help("Training samples accepted, per target")
                     .Register(r)),
        fits(prometheus::BuildCounter()
                 .Name("llmd_trainer_fits_total")
                 .Help("Model fits by target and result")
                 .Register(r)),
        fit_seconds(prometheus::BuildHistogram()
                        .Name("llmd_trainer_fit_duration_seconds")
                        .Help("Wall time of one target's fit incl. ensemble and evaluation")
                        .Register(r)),
        gauges(prometheus::BuildGauge()
                   .Name("llmd_trainer_holdout_mape_percent")
                   .Help("MAPE of the latest model on the hold-out set")
                   .Register(r)),
        coverage(prometheus::BuildGauge()
                     .Name("llmd_trainer_holdout_coverage_percent")
                     .Help("Share of hold-out actuals at or below the prediction")
                     .Register(r)),
        live_ape(prometheus::BuildGauge()
                     .Name("llmd_trainer_live_prediction_ape_percent")
                     .Help("EWMA of |predicted-actual|/actual for predictions reported by the EPP "
                           "(of expected_*_ms, the central estimate, when the EPP sends it)")
                     .Register(r)),
        live_coverage(prometheus::BuildGauge()
                          .Name("llmd_trainer_live_prediction_coverage_percent")
                          .Help("EWMA of the share of actuals at or below the prediction the EPP "
                                "reported (a p90 model should sit near 90)")
                          .Register(r)),
        version(prometheus::BuildGauge()
                    .Name("llmd_trainer_model_version")
                    .Help("Version of the latest published model set")
                    .Register(r)
                    .Add({})),
        snapshots(prometheus::BuildCounter()
                      .Name("llmd_trainer_snapshots_total")
                      .Help("Sample snapshots written, by result")
                      .Register(r)),
        snapshot_ok(snapshots.Add({{"result", "ok"}})),
        snapshot_error(snapshots.Add({{"result", "error"}})),
        batches(prometheus::BuildCounter()
                    .Name("llmd_trainer_ingest_batches_total")
                    .Help("Bulk ingestion requests by result: ok, duplicate (batch id already "
                          "ingested: 202, nothing added), refused (not persisted: 503, nothing "
                          "added)")
                    .Register(r)),
        batch_ok(batches.Add({{"result", "ok"}})),
        batch_duplicate(batches.Add({{"result", "duplicate"}})),
        batch_refused(batches.Add({{"result", "refused"}})) {
    for (Target t : kTargets) {
      const std::string n(target_name(t));
      int i = static_cast<int>(t);
      ingested_by[i] = &ingested.Add({{"target", n}});
      fit_ok[i] = &fits.Add({{"target", n}, {"result", "ok"}});
      fit_error[i] = &fits.Add({{"target", n}, {"result", "error"}});
      fit_hist[i] = &fit_seconds.Add(
          {{"target", n}},
          prometheus::Histogram::BucketBoundaries{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60});
      mape[i] = &gauges.Add({{"target", n}});
      cov[i] = &coverage.Add({{"target", n}});
      live[i] = &live_ape.Add({{"target", n}});
      live_cov[i] = &live_coverage.Add({{"target", n}});
    }
  }
  prometheus::Family<prometheus::Counter>& ingested;
  prometheus::Family<prometheus::Counter>& fits;
  prometheus::Family<prometheus::Histogram>& fit_seconds;
  prometheus::Family<prometheus::Gauge>& gauges;
  prometheus::Family<prometheus::Gauge>& coverage;
  prometheus::Family<prometheus::Gauge>& live_ape;
  prometheus::Family<prometheus::Gauge>& live_coverage;
  prometheus::Gauge& version;
  prometheus::Family<prometheus::Counter>& snapshots;
  prometheus::Counter& snapshot_ok;
  prometheus::Counter& snapshot_error;
  prometheus::Family<prometheus::Counter>& batches;
  prometheus::Counter& batch_ok;
  prometheus::Counter& batch_duplicate;
  prometheus::Counter& batch_refused;
  std::array<prometheus::Counter*, 2> ingested_by{};
  std::array<prometheus::Counter*, 2> fit_ok{};
  std::array<prometheus::Counter*, 2> fit_error{};
  std::array<prometheus::Histogram*, 2> fit_hist{};
  std::array<prometheus::Gauge*, 2> mape{};
  std::array<prometheus::Gauge*, 2> cov{};
  std::array<prometheus::Gauge*, 2> live{};
  std::array<double, 2> live_ewma{-1, -1};  // guarded by TrainerService::mu_
  std::array<prometheus::Gauge*, 2> live_cov{};
  std::array<double, 2> live_cov_ewma{-1, -1};  // guarded by TrainerService::mu_
};

TrainerService::TrainerService(TrainerConfig config, prometheus::Registry& registry)
    : config_(std::move(config)),
      metrics_(std::make_unique<Metrics>(registry)),
      store_(config_.store),
      batch_ids_(config_.batch_id_window) {
  fit_config_.objective = config_.objective;
  fit_config_.alpha = config_.quantile_alpha;
  fit_config_.params = config_.params;
  fit_config_.linear_base = config_.linear_base;
  load_models_at_start();
  load_snapshot_at_start();
}

TrainerService::~TrainerService() {
  stop_background();
}

std::string TrainerService::model_path(const std::string& name) const {
  if (name == "ttft") return config_.ttft_model_path;
  if (name == "tpot") return config_.tpot_model_path;
  if (name == "ttft_gated") return config_.ttft_gated_model_path;
  if (name == "tpot_gated") return config_.tpot_gated_model_path;
  return "";
}

std::string TrainerService::samples_path() const {
  if (!config_.samples_path.empty()) {
    return config_.samples_path;
  }
  auto dir = std::filesystem::path(config_.ttft_model_path).parent_path();
  return (dir / "training_samples.bin").string();
}

std::pair<std::string, int64_t> TrainerService::load_or_start_generation(bool models_found) const {
  const auto path = std::filesystem::path(config_.ttft_model_path).parent_path() / "generation";
  if (models_found) {
    // "<id>\n<highest published version>\n" (earlier trainers wrote the id alone).
    if (auto bytes = util::read_file(path.string())) {
      std::istringstream in(*bytes);
      std::string id;
      int64_t version = 0;
      in >> id >> version;
      if (!id.empty() && id.size() <= 64) {
        return {id, std::max<int64_t>(version, 0)};
      }
    }
  }
  // 128 bits straight from the OS entropy source: two trainers never pick the same lineage.
  std::random_device entropy;
  uint64_t words[2] = {0, 0};
  for (uint64_t& w : words) {
    for (int i = 0; i < 2; ++i) {
      w = (w << 32) | entropy();
    }
  }
  const std::string id = fmt::format("{:016x}{:016x}", words[0], words[1]);
  spdlog::info("model generation {} ({})", id,
               models_found ? "model files without a generation" : "no model files: a new lineage");
  return {id, 0};
}

bool TrainerService::persist_lineage(const std::string& generation, int64_t version) const {
  const auto path = std::filesystem::path(config_.ttft_model_path).parent_path() / "generation";
  try {
    util::write_file_atomic(path.string(), fmt::format("{}\n{}\n", generation, version));
    return true;
  } catch (const std::exception& e) {
    spdlog::warn("cannot persist model generation {} version {} at {}: {}", generation, version,
                 path.string(), e.what());
    return false;
  }
}

void TrainerService::load_models_at_start() {
  auto next = std::make_shared<PublishedModels>();
  std::vector<std::string> written;
  for (Target t : kTargets) {
    const std::string name(target_name(t));
    const std::string path = model_path(name);
    model::TargetPredictor& pred = t == Target::kTtft ? next->ttft : next->tpot;
    if (auto bytes = util::read_file(path)) {
      try {
        pred.base = model::TargetModel::load(*bytes);
        int64_t v = pred.base->version();
        auto mtime = std::filesystem::last_write_time(path);
        auto sys = std::chrono::file_clock::to_sys(mtime);
        next->files[name] =
            ModelFile{std::make_shared<const std::string>(std::move(*bytes)), v,
                      std::chrono::time_point_cast<util::SystemTime::duration>(sys)};
        next->version = std::max(next->version, v);
        spdlog::info("loaded {} model from {} (version {})", name, path, v);
      } catch (const std::exception& e) {
        spdlog::error("ignoring {} model at {}: {}", name, path, e.what());
        pred.base = nullptr;
      }
    }
    const std::string gname = name + "_gated";
    const std::string gpath = model_path(gname);
    if (auto bytes = util::read_file(gpath); bytes && config_.ensemble_mode && pred.base) {
      try {
        pred.gated = model::GatedModel::load(*bytes);
        int64_t v = pred.gated->noqueue->version();
        next->files[gname] = make_file(std::move(*bytes), v);
        next->version = std::max(next->version, v);
      } catch (const std::exception& e) {
        spdlog::error("ignoring {} model at {}: {}", gname, gpath, e.what());
      }
    }
  }
  // Cold start: constant default models, published so predictors can sync them too.
  bool need_default = !next->ttft.base || !next->tpot.base;
  const auto [generation, published_before] = load_or_start_generation(!need_default);
  next->generation = generation;
  if (need_default) {
    ++next->version;
  } else if (published_before > next->version) {
    // The model files are older than what this lineage already served (their write was
    // refused, e.g. by a full disk): serve them under a version above it, never below.
    const int64_t v =
        persist_lineage(generation, published_before + 1) ? published_before + 1 : published_before;
    spdlog::warn(
        "model files are at version {} but lineage {} published version {}: serving "
        "them as version {}",
        next->version, generation, published_before, v);
    next->version = v;
    for (Target t : kTargets) {
      const std::string name(target_name(t));
      const model::TargetPredictor& pred = t == Target::kTtft ? next->ttft : next->tpot;
      next->files[name] = make_file(pred.base->serialize(v), v);
      written.push_back(name);
      if (pred.gated && next->files.count(name + "_gated") > 0) {
        next->files[name + "_gated"] = make_file(pred.gated->serialize(v), v);
        written.push_back(name + "_gated");
      }
    }
  }
  for (Target t : kTargets) {
    model::TargetPredictor& pred = t == Target::kTtft ? next->ttft : next->tpot;
    if (pred.base) {
      describe(*pred.base, *next, static_cast<int>(t));
      continue;
    }
    const std::string name(target_name(t));
    pred.base =
        model::make_constant_model(base_set(t), config_.default_model_ms, config_.objective);
    pred.gated = nullptr;
    next->files[name] = make_file(pred.base->serialize(next->version), next->version);
    describe(*pred.base, *next, static_cast<int>(t));
    next->intercept[static_cast<int>(t)] = config_.default_model_ms;
    written.push_back(name);
    spdlog::info("no usable {} model: using the default model ({} ms)", name,
                 config_.default_model_ms);
  }
  if (next->version > published_before) {
    persist_lineage(next->generation, next->version);
  }
  publish(next, written, {});
}

void TrainerService::load_snapshot_at_start() {
  const std::string path = samples_path();
  const std::string log_path = path + ".log";
  // A log of the previous format waits here until a snapshot holds its samples (new entries
  // cannot be appended to it).
  const std::string old_log_path = path + ".log.v1";
  bool rewrite = false;  // compact what was restored into a fresh snapshot and empty the log
  bool log_is_old_format = false;
  {
    std::lock_guard lock(mu_);
    if (auto bytes = util::read_file(path)) {
      auto r = decode_snapshot(*bytes, store_, &batch_ids_);
      if (!r.ok || !r.complete) {
        spdlog::error(
            "sample snapshot {}: {}; restored {} samples, lost {} ({} damaged "
            "region(s))",
            path, r.error, r.samples, r.lost_samples, r.damaged_regions);
        // A copy for inspection; the file itself stays until a new snapshot replaces it, so a
        // rewrite refused by a full disk loses nothing more.
        try {
          util::write_file_atomic(path + ".corrupt", *bytes);
        } catch (const std::exception& e) {
          spdlog::warn("no copy of the damaged snapshot: {}", e.what());
        }
        rewrite = true;
      } else {
        spdlog::info("restored {} samples and {} batch ids from {}", r.samples, batch_ids_.size(),
                     path);
      }
    }
    if (config_.durable_ingest) {
      for (const std::string& p : {old_log_path, log_path}) {
        auto log = util::read_file(p);
        if (!log) {
          continue;
        }
        log_is_old_format = p == log_path && !log->empty() && !is_current_sample_log(*log);
        auto r = replay_sample_log(*log, store_, &batch_ids_);
        if (r.samples > 0 || !r.complete || r.duplicate_batches > 0) {
          spdlog::info("replayed {} samples from {} ({} batches already in the snapshot){}",
                       r.samples, p, r.duplicate_batches, r.complete ? "" : "; " + r.error);
          rewrite = true;
        }
      }
    }
    snapshot_generation_ = change_counter_;
  }
  if (config_.durable_ingest) {
    std::lock_guard log_lock(log_mu_);
    std::error_code ec;
    if (log_is_old_format) {
      std::filesystem::rename(log_path, old_log_path, ec);
    }
    try {
      log_ = std::make_unique<SampleLog>(log_path);
    } catch (const std::exception& e) {
      // Serving beats not serving: each ingest retries the open and says why it failed (503).
      spdlog::error("{}", e.what());
    }
    if (rewrite && log_ && snapshot_locked(true)) {
      std::filesystem::remove(old_log_path, ec);
    }
  }
}

void TrainerService::publish(std::shared_ptr<PublishedModels> next,
                             const std::vector<std::string>& written,
                             const std::vector<std::string>& removed) {
  for (const auto& name : written) {
    const std::string path = model_path(name);
    try {
      util::write_file_atomic(path, *next->files.at(name).bytes);
    } catch (const std::exception& e) {
      // Predictors still get the model over HTTP; only the restart copy is missing.
      spdlog::error("could not write {} model to {}: {}", name, path, e.what());
    }
  }
  for (const auto& name : removed) {
    std::error_code ec;
    std::filesystem::remove(model_path(name), ec);
  }
  metrics_->version.Set(static_cast<double>(next->version));
  std::lock_guard lock(published_mu_);
  published_ = std::move(next);
}

std::shared_ptr<const PublishedModels> TrainerService::models() const {
  std::lock_guard lock(published_mu_);
  return published_;
}

IngestResult TrainerService::add_entries(const std::vector<features::TrainingEntry>& entries,
                                         const std::string& batch_id) {
  // log_mu_ serialises ingests: nothing is added between the plan and its commit, and two
  // requests with the same batch id cannot both miss it.
  std::lock_guard log_lock(log_mu_);
  SampleStore::Plan plan;
  {
    std::lock_guard lock(mu_);
    if (!batch_id.empty() && batch_ids_.contains(batch_id)) {
      metrics_->batch_duplicate.Increment();
      return IngestResult{true};
    }
    plan = store_.begin_plan();
  }
  for (const auto& e : entries) {
    store_.plan_add(plan, e.features, e.actual_ttft_ms, e.actual_tpot_ms);  // const: no mu_
  }
  if (config_.durable_ingest) {
    const std::string entry = encode_log_entry(plan.placed, batch_id);
    if (!entry.empty()) {
      try {
        if (!log_) {
          log_ = std::make_unique<SampleLog>(samples_path() + ".log");
        }
        log_->append(entry);
      } catch (const std::runtime_error&) {
        metrics_->batch_refused.Increment();
        throw;  // nothing was stored: the client keeps the batch and retries it
      }
    }
  }
  std::lock_guard lock(mu_);
  store_.commit(std::move(plan));
  batch_ids_.add(batch_id);
  track_live_error(entries);
  change_counter_ += entries.empty() && batch_id.empty() ? 0 : 1;
  metrics_->batch_ok.Increment();
  return IngestResult{false};
}

void TrainerService::track_live_error(const std::vector<features::TrainingEntry>& entries) {
  for (const auto& e : entries) {
    const double actual[2] = {e.actual_ttft_ms, e.actual_tpot_ms};
    const double predicted[2] = {e.predicted_ttft_ms, e.predicted_tpot_ms};
    const double expected[2] = {e.expected_ttft_ms, e.expected_tpot_ms};
    for (int i = 0; i < 2; ++i) {
      if (actual[i] > 0) {
        metrics_->ingested_by[i]->Increment();
        if (predicted[i] >= 0) {
          // Error of the central estimate when the EPP sent it (a quantile bound is off the
          // actual by its spread even when exact); coverage is the bound's.
          const double estimate = expected[i] >= 0 ? expected[i] : predicted[i];
          double ape = 100.0 * std::fabs(estimate - actual[i]) / actual[i];
          double& ewma = metrics_->live_ewma[i];
          ewma = ewma < 0 ? ape : 0.98 * ewma + 0.02 * ape;
          metrics_->live[i]->Set(ewma);
          const double covered = predicted[i] >= actual[i] ? 100.0 : 0.0;
          double& cov = metrics_->live_cov_ewma[i];
          cov = cov < 0 ? covered : 0.98 * cov + 0.02 * covered;
          metrics_->live_cov[i]->Set(cov);
        }
      }
    }
  }
}

FlushResult TrainerService::flush(bool training, bool test, bool metrics) {
  std::lock_guard log_lock(log_mu_);
  FlushResult r;
  {
    std::lock_guard lock(mu_);
    auto cleared = store_.clear(training, test);
    r.training = cleared.training;
    r.test = cleared.test;
    if (metrics) {
      for (auto& q : evals_) {
        q.clear();
      }
      r.metrics_cleared = true;
    }
    ++change_counter_;
  }
  if (log_) {
    snapshot_locked(true);
  }
  return r;
}

DataStatus TrainerService::data_status() const {
  std::lock_guard lock(mu_);
  DataStatus s;
  for (Target t : kTargets) {
    int i = static_cast<int>(t);
    s.training[i] = store_.training_count(t);
    s.test[i] = store_.test_count(t);
    for (int b = 0; b < kBucketCount; ++b) {
      s.buckets[i][b] = store_.bucket_count(t, b);
      (BucketKey::from_index(b).queue == 0 ? s.noqueue[i] : s.queued[i]) += s.buckets[i][b];
    }
    s.scores_count[i] = evals_[i].size();
  }
  return s;
}

std::array<std::deque<Evaluation>, 2> TrainerService::evaluations() const {
  std::lock_guard lock(mu_);
  return evals_;
}

bool TrainerService::train_once() {
  std::lock_guard train_lock(train_mu_);
  auto current = models();
  auto next = std::make_shared<PublishedModels>(*current);
  std::vector<std::string> written;
  std::vector<std::string> removed;
  bool changed = false;
  const auto trained_before = trained_generation_;
  for (Target t : kTargets) {
    const int ti = static_cast<int>(t);
    std::vector<Sample> samples;
    std::vector<Sample> test;
    uint64_t generation = 0;
    {
      std::lock_guard lock(mu_);
      generation = store_.generation(t);
      if (generation == trained_generation_[ti] ||
          store_.training_count(t) < config_.min_samples_for_retrain) {
        continue;
      }
      samples = store_.training_samples(t);
      test = store_.test_samples(t);
    }
    const std::string name(target_name(t));
    const auto started = Clock::now();
    try {
      const uint64_t seed = config_.params.seed + generation;
      model::TargetPredictor pred;
      pred.base = fit_target_model(fit_config_, base_set(t), samples, seed);
      if (config_.ensemble_mode) {
        std::vector<Sample> noqueue, queued;
        for (const auto& s : samples) {
          (features::is_queued(s.features) ? queued : noqueue).push_back(s);
        }
        if (noqueue.size() >= config_.min_samples_for_split &&
            queued.size() >= config_.min_samples_for_split) {
          auto gated = std::make_shared<model::GatedModel>();
          gated->noqueue = fit_target_model(fit_config_, noqueue_set(t), noqueue, seed + 1);
          gated->queued = fit_target_model(fit_config_, base_set(t), queued, seed + 2);
          pred.gated = gated;
        }
      }
      std::optional<Evaluation> eval;
      if (!test.empty()) {
        std::vector<features::FeatureInput> rows;
        std::vector<double> actual;
        for (const auto& s : test) {
          rows.push_back(s.features);
          actual.push_back(s.actual_ms);
        }
        eval = evaluate(pred.predict(rows), actual, config_.quantile_alpha);
      }
      if (!changed) {
        ++next->version;
        changed = true;
      }
      const std::string gname = name + "_gated";
      next->files[name] = make_file(pred.base->serialize(next->version), next->version);
      written.push_back(name);
      if (pred.gated) {
        next->files[gname] = make_file(pred.gated->serialize(next->version), next->version);
        written.push_back(gname);
      } else if (next->files.erase(gname) > 0) {
        removed.push_back(gname);
        spdlog::info("{} ensemble inactive: removed gated model", name);
      }
      describe(*pred.base, *next, ti);
      (t == Target::kTtft ? next->ttft : next->tpot) = pred;
      double secs = std::chrono::duration<double>(Clock::now() - started).count();
      metrics_->fit_hist[ti]->Observe(secs);
      metrics_->fit_ok[ti]->Increment();
      {
        std::lock_guard lock(mu_);
        trained_generation_[ti] = generation;
        if (eval) {
          evals_[ti].push_back(*eval);
          while (evals_[ti].size() > 5) {
            evals_[ti].pop_front();
          }
        }
      }
      if (eval) {
        metrics_->mape[ti]->Set(eval->mape_percent);
        metrics_->cov[ti]->Set(eval->coverage_percent);
        spdlog::info(
            "trained {} on {} samples in {:.2f}s (ensemble {}): hold-out n={} coverage "
            "{:.1f}% pinball {:.3f} MAPE {:.1f}%",
            name, samples.size(), secs, pred.gated ? "on" : "off", eval->samples,
            eval->coverage_percent, eval->pinball_loss, eval->mape_percent);
      } else {
        spdlog::info("trained {} on {} samples in {:.2f}s (no hold-out samples yet)", name,
                     samples.size(), secs);
      }
    } catch (const std::exception& e) {
      metrics_->fit_error[ti]->Increment();
      spdlog::error("training {} failed, keeping the previous model: {}", name, e.what());
    }
  }
  if (!changed) {
    return false;
  }
  if (!persist_lineage(next->generation, next->version)) {
    // Publishing a version a restart could not get back to would let versions go backwards.
    std::lock_guard lock(mu_);
    trained_generation_ = trained_before;
    spdlog::error("not publishing model version {}: its lineage record could not be saved",
                  next->version);
    return false;
  }
  next->last_retrain = std::chrono::system_clock::now();
  publish(next, written, removed);
  spdlog::info("published model set version {}", next->version);
  return true;
}

bool TrainerService::snapshot(bool force) {
  std::lock_guard log_lock(log_mu_);
  return snapshot_locked(force);
}

bool TrainerService::snapshot_locked(bool force) {
  std::string bytes;
  uint64_t counter = 0;
  {
    std::lock_guard lock(mu_);
    if (!force && change_counter_ == snapshot_generation_) {
      return true;
    }
    counter = change_counter_;
    bytes = encode_snapshot(store_, &batch_ids_);
  }
  try {
    util::write_file_atomic(samples_path(), bytes);
  } catch (const std::exception& e) {
    metrics_->snapshot_error.Increment();
    spdlog::error("sample snapshot failed: {}", e.what());
    return false;
  }
  metrics_->snapshot_ok.Increment();
  if (log_) {
    try {
      log_->reset();  // the snapshot holds everything the log held
    } catch (const std::exception& e) {
      spdlog::error("{} (the log keeps growing until the next snapshot)", e.what());
    }
  }
  std::lock_guard lock(mu_);
  snapshot_generation_ = counter;
  return true;
}

void TrainerService::start_background() {
  training_thread_ = named_thread("trainer-train", [this] { training_loop(); });
  snapshot_thread_ = named_thread("trainer-snap", [this] { snapshot_loop(); });
}

void TrainerService::stop_background() {
  {
    std::lock_guard lock(stop_mu_);
    if (stopping_) {
      return;
    }
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (training_thread_.joinable()) {
    training_thread_.join();
  }
  if (snapshot_thread_.joinable()) {
    snapshot_thread_.join();
  }
  snapshot();
}

void TrainerService::training_loop() {
  const auto interval = std::chrono::duration<double>(config_.retraining_interval_sec);
  std::unique_lock lock(stop_mu_);
  while (!stop_cv_.wait_for(lock, interval, [this] { return stopping_; })) {
    lock.unlock();
    train_once();
    lock.lock();
  }
}

void TrainerService::snapshot_loop() {
  const auto interval = std::chrono::duration<double>(config_.snapshot_interval_sec);
  std::unique_lock lock(stop_mu_);
  while (!stop_cv_.wait_for(lock, interval, [this] { return stopping_; })) {
    lock.unlock();
    snapshot();
    lock.lock();
  }
}

std::string TrainerService::export_bundle() const {
  auto m = models();
  DataStatus s = data_status();
  std::vector<util::TarMember> members;
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  for (const auto& [name, file] : m->files) {
    auto mtime =
        std::chrono::duration_cast<std::chrono::seconds>(file.modified.time_since_epoch()).count();
    members.push_back({std::filesystem::path(model_path(name)).filename().string(), *file.bytes,
                       mtime > 0 ? mtime : now});
  }
  nlohmann::json meta = {{"model_type", "xgboost"},
                         {"objective_type", model::objective_name(config_.objective)},
                         {"quantile_alpha", config_.quantile_alpha},
                         {"exported_at", util::now_rfc3339()},
                         {"version", m->version},
                         {"ttft_samples", s.training[0]},
                         {"tpot_samples", s.training[1]}};
  members.push_back({"metadata.json", meta.dump(2), now});
  return util::make_tar_gz(members);
}

std::string TrainerService::reference_metrics_text() const {
  auto m = models();
  DataStatus s = data_status();
  auto evals = evaluations();
  std::string out;
  auto line = [&](const std::string& text) { out += text + "\n"; };
  line(fmt::format("model_type{{type=\"xgboost\"}} 1"));
  line(fmt::format("objective_type{{type=\"{}\"}} 1", model::objective_name(config_.objective)));
  line(fmt::format("model_quantile{{}} {}", config_.quantile_alpha));
  line(fmt::format("ensemble_active{{}} {}", m->ensemble_active() ? 1 : 0));
  line(fmt::format("ensemble_mode{{}} {}", config_.ensemble_mode ? 1 : 0));
  for (Target t : kTargets) {
    int i = static_cast<int>(t);
    const std::string n(target_name(t));
    line(fmt::format("{}_intercept{{}} {}", n, m->intercept[i]));
    for (const auto& [feature, gain] : m->importance[i]) {
      line(fmt::format("{}_importance{{feature=\"{}\"}} {}", n, feature, gain));
    }
    for (const auto& [feature, coef] : m->coef[i]) {
      line(fmt::format("{}_coef{{feature=\"{}\"}} {}", n, feature, coef));
    }
  }
  static const char* kRanges[] = {"0.00-0.25", "0.25-0.50", "0.50-0.75", "0.75-1.00"};
  for (Target t : kTargets) {
    int i = static_cast<int>(t);
    const std::string n(target_name(t));
    std::array<std::size_t, kQueueBuckets> q{};
    std::array<std::size_t, kCacheBuckets> c{};
    std::array<std::size_t, kPrefixBuckets> p{};
    for (int b = 0; b < kBucketCount; ++b) {
      std::size_t count = s.buckets[i][b];
      if (count == 0) {
        continue;
      }
      auto key = BucketKey::from_index(b);
      q[key.queue] += count;
      c[key.cache] += count;
      p[key.prefix] += count;
      line(fmt::format(
          "training_samples_count{{model=\"{}\",queue_bucket=\"{}\",cache_bucket=\"{}\","
          "prefix_bucket=\"{}\"}} {}",
          n, key.queue, key.cache, key.prefix, count));
    }
    for (int k = 0; k < kQueueBuckets; ++k) {
      line(fmt::format("training_samples_queue_total{{model=\"{}\",queue_bucket=\"{}\"}} {}", n, k,
                       q[k]));
    }
    for (int k = 0; k < kCacheBuckets; ++k) {
      line(fmt::format("training_samples_cache_total{{model=\"{}\",cache_bucket=\"{}\"}} {}", n, k,
                       c[k]));
    }
    for (int k = 0; k < kPrefixBuckets; ++k) {
      line(fmt::format(
          "training_samples_prefix_total{{model=\"{}\",prefix_bucket=\"{}\",range=\"{}\"}} {}", n,
          k, kRanges[k], p[k]));
    }
    for (std::size_t idx = 0; idx < evals[i].size(); ++idx) {
      const auto& e = evals[i][idx];
      if (config_.objective == model::Objective::kQuantile) {
        line(fmt::format("{}_quantile_loss{{idx=\"{}\"}} {}", n, idx, e.pinball_loss));
        line(fmt::format("{}_coverage_percent{{idx=\"{}\"}} {}", n, idx, e.coverage_percent));
        line(
            fmt::format("{}_violation_rate_percent{{idx=\"{}\"}} {}", n, idx, e.violation_percent));
      } else {
        line(fmt::format("{}_mae{{idx=\"{}\"}} {}", n, idx, e.mae));
        line(fmt::format("{}_rmse{{idx=\"{}\"}} {}", n, idx, e.rmse));
      }
      line(fmt::format("{}_mape_percent{{idx=\"{}\"}} {}", n, idx, e.mape_percent));
    }
  }
  if (config_.objective == model::Objective::kQuantile) {
    line(fmt::format("target_coverage_percent{{}} {}", config_.quantile_alpha * 100.0));
  }
  return out;
}

}  // namespace llmd::trainer
