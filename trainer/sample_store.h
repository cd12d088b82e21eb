#pragma once
// Stratified training samples (predictor-api.md section 3.1).
//
// Key = (queue bucket 0..4, cache bucket 0..19, prefix bucket 0..3): 400 FIFO windows per
// target, TTFT and TPOT kept apart (an entry goes to a target only when that target is > 0).
// A random `test_ratio` of entries goes to a FIFO hold-out set per target instead.
//
// Pure logic, no locks: the owner (TrainerState) serialises access. Snapshot copies are cheap
// enough (<= 400k samples) to hand to the fitting thread.
#include <array>
#include <cstdint>
#include <deque>
#include <random>
#include <string>
#include <vector>

#include "common/features/schema.h"

namespace llmd::trainer {

enum class Target : uint8_t { kTtft = 0, kTpot = 1 };
inline constexpr std::array kTargets = {Target::kTtft, Target::kTpot};
std::string_view target_name(Target t);

struct Sample {
  features::FeatureInput features;
  float actual_ms = 0;
};

inline constexpr int kQueueBuckets = 5;
inline constexpr int kCacheBuckets = 20;
inline constexpr int kPrefixBuckets = 4;
inline constexpr int kBucketCount = kQueueBuckets * kCacheBuckets * kPrefixBuckets;

struct BucketKey {
  int queue = 0;
  int cache = 0;
  int prefix = 0;
  int index() const { return (queue * kCacheBuckets + cache) * kPrefixBuckets + prefix; }
  static BucketKey from_index(int i);
  std::string name() const;  // "queue_{q}_cache_{c}_prefix_{p}"
};
int queue_bucket(int64_t num_request_waiting);  // 0 | 1-2 | 3-5 | 6-10 | 11+
int cache_bucket(double kv_cache_percentage);   // min(floor(kv*20), 19)
int prefix_bucket(double prefix_cache_score);   // min(floor(p*4), 3)
BucketKey bucket_of(const features::FeatureInput& f);

struct SampleStoreConfig {
  std::size_t max_per_bucket = 500;
  double test_ratio = 0.1;
  std::size_t max_test_per_target = 1000;
  uint64_t seed = 0x5eed;
};

class SampleStore {
 public:
  explicit SampleStore(SampleStoreConfig config);

  // Where add() put a sample: what restore() needs to put it there again (the sample log).
  struct Placement {
    Target target;
    bool test;
    Sample sample;
  };
  // Adds one observation; `ttft_ms`/`tpot_ms` of 0 means not observed. Appends the samples it
  // stored to `placed` when given.
  void add(const features::FeatureInput& f, double ttft_ms, double tpot_ms,
           std::vector<Placement>* placed = nullptr);

  // All-or-nothing ingestion: decide where a batch goes (the random hold-out split runs on a
  // copy of the store's generator), make it durable, then commit() it. A plan that is never
  // committed leaves no trace, and committing gives exactly what add() would have given.
  // Valid only while nothing else is added between begin_plan() and commit().
  struct Plan {
    std::vector<Placement> placed;
    std::mt19937_64 rng;
  };
  Plan begin_plan() const { return Plan{{}, rng_}; }
  void plan_add(Plan& plan, const features::FeatureInput& f, double ttft_ms, double tpot_ms) const;
  void commit(Plan&& plan);
  // Re-inserts a persisted sample where it was (no random split).
  void restore(Target t, bool test, const Sample& s);

  std::size_t training_count(Target t) const { return training_count_[static_cast<int>(t)]; }
  std::size_t test_count(Target t) const { return test_[static_cast<int>(t)].size(); }
  std::size_t bucket_count(Target t, int bucket) const {
    return buckets_[static_cast<int>(t)][bucket].size();
  }
  // Samples added per target since construction (monotonic; used to detect new data).
  uint64_t generation(Target t) const { return generation_[static_cast<int>(t)]; }

  std::vector<Sample> training_samples(Target t) const;
  std::vector<Sample> test_samples(Target t) const;

  struct Cleared {
    std::array<std::size_t, 2> training{};
    std::array<std::size_t, 2> test{};
  };
  Cleared clear(bool training, bool test);

  const SampleStoreConfig& config() const { return config_; }

 private:
  SampleStoreConfig config_;
  std::mt19937_64 rng_;
  std::array<std::array<std::deque<Sample>, kBucketCount>, 2> buckets_;
  std::array<std::deque<Sample>, 2> test_;
  std::array<std::size_t, 2> training_count_{};
  std::array<uint64_t, 2> generation_{};
};

}  // namespace llmd::trainer
