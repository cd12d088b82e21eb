// The scraper against in-process fake pods on loopback: phases spread over the interval,
// answers published in batches, a hung pod that delays only itself, membership changes, and
// nothing after stop(). The tests wait for counts (with a generous bound against a hang), not
// for durations; the one spread check compares scrape times against a 1-s interval with a
// wide margin, and the stop check waits for something not to happen.
#include "epp/datastore/scraper.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/common/http_test_util.h"

namespace llmd::epp {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr const char* kMetrics =
    "# HELP vllm:num_requests_waiting Waiting.\n"
    "vllm:num_requests_waiting{model_name=\"m\"} 1\n"
    "vllm:num_requests_running{model_name=\"m\"} 2\n"
    "vllm:kv_cache_usage_perc{model_name=\"m\"} 0.25\n";

// A pod's /metrics: counts the scrapes and remembers when each arrived.
class FakePod {
 public:
  FakePod()
      : server_(options(), [this](http::Request& r) {
          if (r.path != "/metrics") {
            return http::Response::detail(404, "Not Found");
          }
          {
            std::lock_guard lock(mu_);
            times_.push_back(Clock::now());
          }
          ++scrapes_;
          return http::Response::text(200, kMetrics, "text/plain");
        }) {}
  std::string address() const { return "127.0.0.1:" + std::to_string(server_.port()); }
  int scrapes() const { return scrapes_.load(); }
  std::vector<Clock::time_point> times() const {
    std::lock_guard lock(mu_);
    return times_;
  }

 private:
  static http::ServerOptions options() {
    auto o = http::testing::local_options();
    o.io_threads = 1;
    return o;
  }
  std::atomic<int> scrapes_{0};
  mutable std::mutex mu_;
  std::vector<Clock::time_point> times_;
  http::testing::RunningServer server_;  // last: stops before the state it uses goes
};

// A pod that accepts connections and never answers (its /metrics hangs): counts connections.
class HungPod {
 public:
  HungPod() {
    std::tie(listen_fd_, port_) = http::testing::listen_on_loopback();
    thread_ = std::thread([this] {
      while (true) {
        const int fd = ::accept(listen_fd_, nullptr, nullptr);
        if (fd < 0) {
          return;
        }
        std::lock_guard lock(mu_);
        held_.push_back(fd);
        ++connections_;
      }
    });
  }
  ~HungPod() {
    ::shutdown(listen_fd_, SHUT_RDWR);
    thread_.join();
    ::close(listen_fd_);
    for (int fd : held_) {
      ::close(fd);
    }
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  int connections() const { return connections_.load(); }

 private:
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<int> connections_{0};
  std::mutex mu_;
  std::vector<int> held_;
  std::thread thread_;
};

// Polls `done` every millisecond; false after `limit` (a hang, not a speed bound).
template <typename F>
bool wait_for(F done, std::chrono::seconds limit = 30s) {
  const auto end = Clock::now() + limit;
  while (!done()) {
    if (Clock::now() > end) {
      return false;
    }
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

bool ready(const PodRegistry& r, const std::string& name) {
  const auto snap = r.snapshot();
  const auto* p = snap->find(name);
  return p != nullptr && p->scraped_ok;
}

// Pods fill the interval's slots evenly, whatever their number: 100 pods in 10 slots of 5 ms
// are scraped 9 to 11 at a time, not 100 at once.
TEST(ScrapePhase, AnyNumberOfPodsFillsTheSlotsEvenly) {
  const auto interval = std::chrono::nanoseconds(50ms);
  const auto slot = std::chrono::nanoseconds(5ms);
  for (std::size_t n : {3u, 10u, 100u, 1000u}) {
    std::vector<int> per_slot(10, 0);
    for (uint64_t k = 0; k < n; ++k) {
      const auto p = scrape_phase(k, interval, slot);
      ASSERT_GE(p.count(), 0);
      ASSERT_LT(p, interval);
      ASSERT_EQ(p.count() % slot.count(), 0) << "on a slot boundary";
      ++per_slot[static_cast<std::size_t>(p / slot)];
    }
    const auto [lo, hi] = std::minmax_element(per_slot.begin(), per_slot.end());
    EXPECT_LE(*hi, static_cast<int>((n + 9) / 10) + 1) << n << " pods";
    EXPECT_GE(*lo, static_cast<int>(n / 10) - 1) << n << " pods";
  }
  EXPECT_EQ(scrape_phase(0, interval, slot).count(), 0);
  EXPECT_EQ(scrape_phase(7, interval, slot), scrape_phase(7, interval, slot)) << "stable";
  // A slot longer than the interval: one slot, every pod at the interval's start.
  EXPECT_EQ(scrape_phase(5, interval, 2 * interval).count(), 0);
  // An interval that is not a multiple of the slot: equal slots that fill it.
  for (uint64_t k = 0; k < 50; ++k) {
    EXPECT_LT(scrape_phase(k, std::chrono::nanoseconds(50ms), std::chrono::nanoseconds(7ms)),
              std::chrono::nanoseconds(50ms));
  }
}

TEST(PodRegistry, ApplyScrapesPublishesOneSnapshotForSeveralAnswers) {
  PodRegistry registry;
  registry.set_pods(
      {{"a", "10.0.0.1:8000", {}}, {"b", "10.0.0.2:8000", {}}, {"c", "10.0.0.3:8000", {}}});
  const uint64_t before = registry.publishes();
  PodMetrics m;
  m.waiting = 3;
  m.scraped_at = Clock::now();
  std::vector<PodRegistry::ScrapeResult> results{{"a", m}, {"b", m}, {"gone", m}};
  registry.apply_scrapes(results);
  EXPECT_EQ(registry.publishes(), before + 1);
  EXPECT_TRUE(ready(registry, "a"));
  EXPECT_TRUE(ready(registry, "b"));
  EXPECT_FALSE(ready(registry, "c"));
  EXPECT_EQ(registry.snapshot()->find("a")->info->metrics.waiting, 3);

  // A failure and a success together: one snapshot again.
  results = {{"a", std::nullopt}, {"c", m}};
  registry.apply_scrapes(results);
  EXPECT_EQ(registry.publishes(), before + 2);
  EXPECT_FALSE(ready(registry, "a"));
  EXPECT_TRUE(ready(registry, "c"));

  // Nothing changes (a pod already failed, an unknown name): nothing is published.
  results = {{"a", std::nullopt}, {"gone", m}};
  registry.apply_scrapes(results);
  EXPECT_EQ(registry.publishes(), before + 2);
}

TEST(PodRegistry, MembershipVersionChangesWithTheSetOfPodsOnly) {
  PodRegistry registry;
  const uint64_t v0 = registry.membership_version();
  registry.set_pods({{"a", "10.0.0.1:8000", {}}});
  const uint64_t v1 = registry.membership_version();
  EXPECT_NE(v1, v0);
  PodMetrics m;
  m.scraped_at = Clock::now();
  registry.update_metrics("a", m);
  registry.mark_scrape_failed("a");
  EXPECT_EQ(registry.membership_version(), v1);
}

// Ten pods on a 1-s interval of ten slots: scraped together once as they join (so that they are
// routable at once), then each in its slot: the second scrapes spread over most of the interval
// (phases 0 .. 0.9 s), where a round-based scraper asks them all within a few milliseconds. No
// pod is scraped again sooner than an interval after its first.
TEST(Scraper, SpreadsThePodsScrapesOverTheInterval) {
  std::vector<std::unique_ptr<FakePod>> fakes;
  std::vector<PodConfig> configs;
  for (int i = 0; i < 10; ++i) {
    fakes.push_back(std::make_unique<FakePod>());
    configs.push_back({"pod-" + std::to_string(i), fakes.back()->address(), {}});
  }
  PodRegistry registry(10s);
  registry.set_pods(configs);
  ScraperOptions o;
  o.interval = 1000ms;
  o.slot = 100ms;
  Scraper scraper(o, registry);
  scraper.start();
  ASSERT_TRUE(wait_for([&] {
    return std::all_of(fakes.begin(), fakes.end(), [](auto& f) { return f->scrapes() >= 2; });
  }));
  scraper.stop();
  std::vector<Clock::time_point> second;
  for (auto& f : fakes) {
    const auto t = f->times();
    second.push_back(t[1]);
    EXPECT_GT(t[1] - t[0], 500ms) << "a second scrape within half an interval of the first";
  }
  const auto [lo, hi] = std::minmax_element(second.begin(), second.end());
  EXPECT_GT(*hi - *lo, 333ms) << "the slot scrapes of 10 pods came within "
                              << std::chrono::duration<double, std::milli>(*hi - *lo).count()
                              << " ms of each other";
}

// Twenty pods every 50 ms in two slots of 25 ms: about one snapshot per slot (ten answers),
// where publishing each answer would make one snapshot per answer.
TEST(Scraper, PublishesAnswersThatArriveCloseTogetherAsOneSnapshot) {
  std::vector<std::unique_ptr<FakePod>> fakes;
  std::vector<PodConfig> configs;
  for (int i = 0; i < 20; ++i) {
    fakes.push_back(std::make_unique<FakePod>());
    configs.push_back({"pod-" + std::to_string(i), fakes.back()->address(), {}});
  }
  PodRegistry registry(10s);
  registry.set_pods(configs);
  ScraperOptions o;
  o.interval = 50ms;
  o.slot = 25ms;
  Scraper scraper(o, registry);
  const uint64_t before = registry.publishes();
  scraper.start();
  ASSERT_TRUE(wait_for([&] { return scraper.published() >= 400; }));
  scraper.stop();
  const uint64_t answers = scraper.published();
  const uint64_t snapshots = registry.publishes() - before;
  EXPECT_GE(snapshots, 1u);
  EXPECT_LE(snapshots * 3, answers) << snapshots << " snapshots for " << answers << " answers";
  for (const auto& c : configs) {
    EXPECT_TRUE(ready(registry, c.name)) << c.name;
    EXPECT_EQ(registry.snapshot()->find(c.name)->info->metrics.running, 2);
  }
}

// A pod whose /metrics hangs (a 60-s timeout here, longer than the test) gets one scrape, never
// a second while it is in flight, and the others are scraped on time meanwhile.
TEST(Scraper, AHungPodDelaysOnlyItself) {
  HungPod hung;
  std::vector<std::unique_ptr<FakePod>> fakes;
  std::vector<PodConfig> configs{{"hung", hung.address(), {}}};
  for (int i = 0; i < 3; ++i) {
    fakes.push_back(std::make_unique<FakePod>());
    configs.push_back({"pod-" + std::to_string(i), fakes.back()->address(), {}});
  }
  PodRegistry registry(10s);
  registry.set_pods(configs);
  ScraperOptions o;
  o.interval = 20ms;
  o.timeout = 60s;
  Scraper scraper(o, registry);
  scraper.start();
  ASSERT_TRUE(wait_for([&] {
    return std::all_of(fakes.begin(), fakes.end(), [](auto& f) { return f->scrapes() >= 15; });
  }));
  EXPECT_EQ(hung.connections(), 1) << "one scrape in flight, no second one";
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(ready(registry, "pod-" + std::to_string(i)));
  }
  EXPECT_FALSE(ready(registry, "hung"));
  const auto stop_started = Clock::now();
  scraper.stop();  // ends the hung exchange instead of waiting for its timeout
  EXPECT_LT(Clock::now() - stop_started, 30s);
}

// A hung pod's timeout marks it failed; a pod that answers again is ready again.
TEST(Scraper, ATimedOutScrapeMarksThePodFailed) {
  HungPod hung;
  FakePod good;
  PodRegistry registry(10s);
  registry.set_pods({{"hung", hung.address(), {}}, {"good", good.address(), {}}});
  PodMetrics m;
  m.scraped_at = Clock::now();
  registry.update_metrics("hung", m);  // ready until its scrape fails
  ASSERT_TRUE(ready(registry, "hung"));
  ScraperOptions o;
  o.interval = 20ms;
  o.timeout = 100ms;
  Scraper scraper(o, registry);
  scraper.start();
  ASSERT_TRUE(wait_for([&] { return !ready(registry, "hung"); }));
  EXPECT_TRUE(wait_for([&] { return ready(registry, "good"); }));
  scraper.stop();
}

TEST(Scraper, PodsThatLeaveStopBeingScrapedAndNewOnesStart) {
  FakePod a, b, c;
  PodRegistry registry(10s);
  registry.set_pods({{"a", a.address(), {}}, {"b", b.address(), {}}});
  ScraperOptions o;
  o.interval = 20ms;
  Scraper scraper(o, registry);
  scraper.start();
  ASSERT_TRUE(wait_for([&] { return a.scrapes() >= 2 && b.scrapes() >= 2; }));
  const int b_at_removal = b.scrapes();
  registry.set_pods({{"a", a.address(), {}}, {"c", c.address(), {}}});
  ASSERT_TRUE(wait_for([&] { return ready(registry, "c"); })) << "a new pod is scraped";
  const int a_now = a.scrapes();
  ASSERT_TRUE(wait_for([&] { return a.scrapes() >= a_now + 3; }));
  const int b_settled = b.scrapes();
  ASSERT_TRUE(wait_for([&] { return a.scrapes() >= a_now + 8; }));
  scraper.stop();
  EXPECT_EQ(b.scrapes(), b_settled) << "a pod that left is not scraped any more";
  EXPECT_LE(b_settled, b_at_removal + 2) << "at most a turn that was due before the change";
  EXPECT_GE(c.scrapes(), 4);
}

TEST(Scraper, NothingRunsAfterStop) {
  HungPod hung;  // a scrape in flight at stop(): its cancellation must not publish a failure
  FakePod a, b;
  PodRegistry registry(10s);
  registry.set_pods({{"a", a.address(), {}}, {"b", b.address(), {}}, {"hung", hung.address(), {}}});
  ScraperOptions o;
  o.interval = 10ms;
  o.slot = 1ms;
  o.timeout = 60s;
  Scraper scraper(o, registry);
  scraper.start();
  ASSERT_TRUE(wait_for([&] { return a.scrapes() >= 3 && b.scrapes() >= 3; }));
  ASSERT_TRUE(wait_for([&] { return hung.connections() >= 1; }));
  scraper.stop();
  const int a_stopped = a.scrapes();
  const int b_stopped = b.scrapes();
  const uint64_t publishes = registry.publishes();
  const uint64_t scrapes = scraper.scrapes();
  // Waits for something not to happen: ten intervals in which no timer, answer or publish may
  // run any more.
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(a.scrapes(), a_stopped);
  EXPECT_EQ(b.scrapes(), b_stopped);
  EXPECT_EQ(registry.publishes(), publishes);
  EXPECT_EQ(scraper.scrapes(), scrapes);
  EXPECT_TRUE(ready(registry, "a")) << "stop() publishes no failure";

  // It starts again after a stop.
  scraper.start();
  EXPECT_TRUE(wait_for([&] { return a.scrapes() > a_stopped; }));
  scraper.stop();
}

}  // namespace
}  // namespace llmd::epp
