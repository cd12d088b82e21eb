#include "trainer/sample_store.h"

#include <cmath>

#include <fmt/format.h>

namespace llmd::trainer {

std::string_view target_name(Target t) {
  return t == Target::kTtft ? "ttft" : "tpot";
}

BucketKey BucketKey::from_index(int i) {
  BucketKey k;
  k.prefix = i % kPrefixBuckets;
  k.cache = (i / kPrefixBuckets) % kCacheBuckets;
  k.queue = i / (kPrefixBuckets * kCacheBuckets);
  return k;
}

std::string BucketKey::name() const {
  return fmt::format("queue_{}_cache_{}_prefix_{}", queue, cache, prefix);
}

int queue_bucket(int64_t waiting) {
  if (waiting <= 0) {
    return 0;
  }
  if (waiting <= 2) {
    return 1;
  }
  if (waiting <= 5) {
    return 2;
  }
  if (waiting <= 10) {
    return 3;
  }
  return 4;
}

int cache_bucket(double kv) {
  int b = static_cast<int>(std::floor(kv * 20.0));
  return b < 0 ? 0 : (b > 19 ? 19 : b);
}

int prefix_bucket(double p) {
  return features::prefill_score_bucket(p);
}

BucketKey bucket_of(const features::FeatureInput& f) {
  return BucketKey{queue_bucket(f.num_request_waiting), cache_bucket(f.kv_cache_percentage),
                   prefix_bucket(f.prefix_cache_score)};
}

SampleStore::SampleStore(SampleStoreConfig config) : config_(config), rng_(config.seed) {}

namespace {

// Where one observation goes: the hold-out draw from `rng`, then one sample per observed target.
void place(std::mt19937_64& rng, double test_ratio, const features::FeatureInput& f, double ttft_ms,
           double tpot_ms, std::vector<SampleStore::Placement>& out) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const bool test = u(rng) < test_ratio;
  const double values[2] = {ttft_ms, tpot_ms};
  for (Target t : kTargets) {
    if (values[static_cast<int>(t)] > 0.0) {
      out.push_back({t, test, Sample{f, static_cast<float>(values[static_cast<int>(t)])}});
    }
  }
}

}  // namespace

void SampleStore::add(const features::FeatureInput& f, double ttft_ms, double tpot_ms,
                      std::vector<Placement>* placed) {
  std::vector<Placement> local;
  std::vector<Placement>& out = placed != nullptr ? *placed : local;
  const std::size_t first = out.size();
  place(rng_, config_.test_ratio, f, ttft_ms, tpot_ms, out);
  for (std::size_t i = first; i < out.size(); ++i) {
    restore(out[i].target, out[i].test, out[i].sample);
    ++generation_[static_cast<int>(out[i].target)];
  }
}

void SampleStore::plan_add(Plan& plan, const features::FeatureInput& f, double ttft_ms,
                           double tpot_ms) const {
  place(plan.rng, config_.test_ratio, f, ttft_ms, tpot_ms, plan.placed);
}

void SampleStore::commit(Plan&& plan) {
  for (const auto& p : plan.placed) {
    restore(p.target, p.test, p.sample);
    ++generation_[static_cast<int>(p.target)];
  }
  rng_ = plan.rng;
}

void SampleStore::restore(Target t, bool test, const Sample& s) {
  const int ti = static_cast<int>(t);
  if (test) {
    auto& q = test_[ti];
    q.push_back(s);
    while (q.size() > config_.max_test_per_target) {
      q.pop_front();
    }
    return;
  }
  auto& q = buckets_[ti][bucket_of(s.features).index()];
  q.push_back(s);
  ++training_count_[ti];
  while (q.size() > config_.max_per_bucket) {
    q.pop_front();
    --training_count_[ti];
  }
}

std::vector<Sample> SampleStore::training_samples(Target t) const {
  const int ti = static_cast<int>(t);
  std::vector<Sample> out;
  out.reserve(training_count_[ti]);
  for (const auto& q : buckets_[ti]) {
    out.insert(out.end(), q.begin(), q.end());
  }
  return out;
}

std::vector<Sample> SampleStore::test_samples(Target t) const {
  const auto& q = test_[static_cast<int>(t)];
  return std::vector<Sample>(q.begin(), q.end());
}

SampleStore::Cleared SampleStore::clear(bool training, bool test) {
  Cleared c;
  for (Target t : kTargets) {
    const int ti = static_cast<int>(t);
    if (training) {
      c.training[ti] = training_count_[ti];
      for (auto& q : buckets_[ti]) {
        q.clear();
      }
      training_count_[ti] = 0;
    }
    if (test) {
      c.test[ti] = test_[ti].size();
      test_[ti].clear();
    }
  }
  return c;
}

}  // namespace llmd::trainer
