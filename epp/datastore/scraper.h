#pragma once
// Scrapes every pod's /metrics on an interval (default 50 ms) and updates the PodRegistry.
//
// - Spread, not a burst: the interval is cut into slots (default 10 ms: 5 slots of a 50-ms
//   interval) and each pod gets one, in order of arrival by a golden-ratio sequence (pod k in
//   slot floor(frac(k x 0.618...) x slots)), so any number of pods, and pods that come later,
//   fill the slots evenly: 100 pods are scraped 20 at a time every 10 ms instead of 100 at
//   once every 50. Each pod has a timer of its own; those of one slot fall due together, so the
//   I/O thread wakes about once per slot and answer group, not several times per pod.
//   (Measured on bench/epp_overhead's 100 pods, 2,000 scrapes/s: a phase per pod woke the
//   thread 5,100 times/s and took 2.6x the CPU of the old bursts; 5-ms slots 1,000 times/s and
//   +30 %; 10-ms slots about +20 %; the old rounds woke it 85 times/s.)
// - A pod's scrapes are one interval apart (from the start of the previous one); a pod whose
//   previous scrape is still in flight skips its turn (never two in flight for one pod), so a
//   pod that hangs delays only its own metrics (its timeout marks it failed) and never
//   another's.
// - Publishing: answers are collected and published as one snapshot once every scrape in
//   flight has answered (a slot's batch is complete), or at the next slot boundary when one is
//   still out (a slow or hung pod). A snapshot copies every pod's entry: one per answer cost
//   O(pods^2) per interval; this is about one per slot, whatever the pod count. A failed or
//   unparsable scrape marks the pod not ready in the next publish.
// - Membership: at the start of every interval the scraper checks the registry's membership
//   version (one atomic load) and only when it changed re-reads the pods: new ones are scraped
//   at once (a pod that joins is routable without waiting for its slot; at start-up that is
//   one burst) and then get their timer; pods that left (or changed address) stop being
//   scraped, and a late answer of theirs is dropped.
//
// - What is asked and how it is read (ScrapeConfig, the data layer of the pipeline config):
//   GET <scheme>://<pod address><path>, each answer read with the engine mapping of the pod's
//   engine label (else the default engine's). set_config() swaps path and mappings in for the
//   next scrapes; the scheme's TLS settings are made at start() (an https config then), so the
//   owner refuses a change of scheme or insecureSkipVerify without a restart
//   (needs_restart()).
//
// Threads: no thread of its own. Everything after start() runs on the AsyncHttpClient's I/O
// thread, which owns the per-pod state below (so it needs no lock): the timers (post_at), the
// exchanges and the answers' parsing. start()/stop() are the owner's (one thread). The
// registry is thread-safe.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "epp/datastore/pod_registry.h"
#include "epp/datastore/scrape_config.h"

namespace llmd::http {
class AsyncHttpClient;
struct AsyncResponse;
}  // namespace llmd::http

namespace llmd::epp {

struct ScraperOptions {
  std::chrono::milliseconds interval{50};
  // Never null: the default config is vLLM's gauges at http://<pod>/metrics.
  std::shared_ptr<const ScrapeConfig> config = std::make_shared<const ScrapeConfig>();
  std::chrono::milliseconds timeout{1000};  // a scrape's bound; the pod then counts as failed
  // The interval's slots (interval / slot of them, at least 1): pods of one slot are scraped
  // together (fewer pods per burst against fewer wake-ups), and an answer waits at most one
  // slot to be published when another scrape is still out.
  std::chrono::milliseconds slot{10};
};

// The offset of the k-th pod's scrapes within the interval: the start of its slot,
// floor(frac(k x golden ratio) x slots) x slot.
std::chrono::nanoseconds scrape_phase(uint64_t k, std::chrono::nanoseconds interval,
                                      std::chrono::nanoseconds slot);

class Scraper {
 public:
  Scraper(ScraperOptions options, PodRegistry& registry);
  ~Scraper();
  Scraper(const Scraper&) = delete;
  Scraper& operator=(const Scraper&) = delete;
  // Starts the client's I/O thread; the first scrapes follow within one interval.
  void start();
  // Ends every timer and exchange; no callback runs and nothing is published once it returns.
  void stop();
  // Scrapes started from now on use `config` (path, engine mappings). Thread-safe.
  void set_config(std::shared_ptr<const ScrapeConfig> config);
  // Why `next` cannot replace the config the scraper started with while it runs (its scheme or
  // insecureSkipVerify differ: the TLS settings are made once), or "".
  std::string needs_restart(const ScrapeConfig& next) const;
  // Scrapes started / answers published so far (tests). Thread-safe.
  uint64_t scrapes() const { return scrapes_.load(std::memory_order_relaxed); }
  uint64_t published() const { return published_.load(std::memory_order_relaxed); }

 private:
  using Clock = std::chrono::steady_clock;
  struct Pod;  // one pod's task: address, phase, whether a scrape is in flight
  using PodPtr = std::shared_ptr<Pod>;

  // All of these run on the client's I/O thread.
  void sync(Clock::time_point due);
  void reconcile(Clock::time_point due);
  void fire(const PodPtr& pod, Clock::time_point due);
  void scrape(const PodPtr& pod);
  void answered(const PodPtr& pod, const EngineMapping* mapping, const http::AsyncResponse& r);
  std::shared_ptr<const ScrapeConfig> config() const;
  void schedule_publish();
  void publish();
  // The first slot boundary after now.
  Clock::time_point next_boundary() const;

  const ScraperOptions options_;         // its config is the one start() made the TLS settings for
  const std::chrono::nanoseconds slot_;  // the slots' length: interval / their count
  PodRegistry& registry_;
  std::unique_ptr<http::AsyncHttpClient> client_;  // the owner's (start/stop)
  // The same client for the I/O thread's code, which must not read client_ while stop()
  // resets it: set before the first task is posted, cleared once the thread has ended.
  http::AsyncHttpClient* io_ = nullptr;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> scrapes_{0};
  std::atomic<uint64_t> published_{0};
  mutable std::mutex config_mu_;                // held only to copy or swap the pointer
  std::shared_ptr<const ScrapeConfig> config_;  // never null; guarded by config_mu_

  // The I/O thread's (set by start() before the thread sees them).
  Clock::time_point epoch_{};  // intervals and slots count from here
  uint64_t membership_seen_ = 0;
  bool membership_known_ = false;
  uint64_t arrivals_ = 0;                           // pods seen so far: the next one's phase index
  std::map<std::string, PodPtr> pods_;              // by name
  std::vector<PodRegistry::ScrapeResult> pending_;  // answers not yet published
  std::size_t outstanding_ = 0;                     // scrapes in flight
  bool publish_armed_ = false;
};

}  // namespace llmd::epp
