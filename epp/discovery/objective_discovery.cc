#include "epp/discovery/objective_discovery.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/util/thread_name.h"
#include "epp/discovery/kube_reader.h"
#include "epp/discovery/objective_tracker.h"

namespace llmd::epp::discovery {
namespace {

using Json = nlohmann::json;

// The groups that define InferenceObjective, in precedence order (the first wins a name).
constexpr std::array<const char*, 2> kGroupVersions = {"llm-d.ai/v1alpha2",
                                                       "inference.networking.x-k8s.io/v1alpha2"};
constexpr std::size_t kListPageSize = 500;
constexpr std::size_t kMaxObjectives = 10000;
constexpr auto kShortestWatch = std::chrono::seconds(1);
constexpr auto kFirstBackoff = std::chrono::milliseconds(1000);
constexpr auto kLongestBackoff = std::chrono::milliseconds(10000);
constexpr auto kPoolGroupPoll = std::chrono::milliseconds(100);

std::string describe(const std::vector<ClusterObjective>& objectives) {
  if (objectives.empty()) {
    return "none";
  }
  std::string out;
  for (const auto& o : objectives) {
    out += (out.empty() ? "" : ", ") + o.name + " (priority " +
           (o.priority ? std::to_string(*o.priority) : std::string("unset")) + ")";
  }
  return out;
}

}  // namespace

struct ObjectiveDiscovery::Impl {
  // One API group's objects, read by its own thread.
  struct Source {
    std::string group_version;
    std::unique_ptr<KubeReader> reader;
    std::thread thread;
    std::vector<ClusterObjective> current;  // guarded by Impl::mu
    bool settled = false;                   // guarded by Impl::mu: its first list was tried
    int unserved_status = 0;                // the 404/403 last logged (its thread only)
  };

  Impl(ObjectiveDiscoveryOptions o, Publish p) : options(std::move(o)), publish(std::move(p)) {
    for (const char* gv : kGroupVersions) {
      auto s = std::make_unique<Source>();
      s->group_version = gv;
      s->reader = std::make_unique<KubeReader>(options.api, [this] { return stopping.load(); });
      sources.push_back(std::move(s));
    }
  }

  std::string pool_id() const { return options.pool_namespace + "/" + options.pool_name; }

  std::string collection(const Source& s) const {
    return "/apis/" + s.group_version + "/namespaces/" + options.pool_namespace +
           "/inferenceobjectives";
  }

  void back_off(std::chrono::milliseconds delay) {
    std::unique_lock lock(mu);
    cv.wait_for(lock, delay, [this] { return stopping.load(); });
  }

  // Sets one source's objectives; publishes the merged list when it changed.
  void set(Source& source, std::vector<ClusterObjective> objectives) {
    {
      std::lock_guard lock(mu);
      source.current = std::move(objectives);
    }
    publish_merged();
  }

  // The source's first list was tried (whatever came of it): until every source's was, nothing
  // is published, so that a name both groups declare never shows the losing group's priority.
  void settle(Source& source) {
    {
      std::lock_guard lock(mu);
      source.settled = true;
    }
    publish_merged();
  }

  void publish_merged() {
    std::lock_guard publishing(publish_mu);
    std::vector<ClusterObjective> merged;
    {
      std::lock_guard lock(mu);
      for (const auto& s : sources) {  // precedence order: a name taken stays taken
        if (!s->settled) {
          return;
        }
        for (const auto& o : s->current) {
          const bool taken = std::any_of(merged.begin(), merged.end(),
                                         [&o](const auto& m) { return m.name == o.name; });
          if (!taken) {
            merged.push_back(o);
          }
        }
      }
    }
    std::sort(merged.begin(), merged.end(),
              [](const auto& a, const auto& b) { return a.name < b.name; });
    if (published && merged == *published) {
      return;
    }
    spdlog::info("discovery: InferenceObjectives of pool {}: {}", pool_id(), describe(merged));
    published = merged;
    publish(merged);
  }

  void warn_all(const Source& s, const std::vector<std::string>& warnings) {
    for (const auto& w : warnings) {
      spdlog::warn("discovery: {} {}", s.group_version, w);
    }
  }

  // Lists the namespace's objectives page by page. `status` is the failing answer's (0: no
  // answer).
  bool list(Source& s, ObjectiveTracker& tracker, int& status, std::string& error) {
    Json merged = {{"items", Json::array()}, {"metadata", Json::object()}};
    std::string token;
    int pages = 0;
    do {
      auto page = s.reader->get_json(collection(s) + "?limit=" + std::to_string(kListPageSize) +
                                         (token.empty() ? "" : "&continue=" + url_encode(token)),
                                     status, error);
      if (!page || !page->is_object()) {
        error = s.group_version + " InferenceObjective list: " +
                (error.empty() ? "HTTP " + std::to_string(status) : error);
        return false;
      }
      if (auto items = page->find("items"); items != page->end() && items->is_array()) {
        for (auto& item : *items) {
          merged["items"].push_back(std::move(item));
        }
      }
      const Json meta = page->value("metadata", Json::object());
      if (pages++ == 0) {
        merged["metadata"] = meta;
      }
      token = string_at(meta, "continue");
    } while (!token.empty() && merged["items"].size() < kMaxObjectives);
    std::vector<std::string> warnings;
    tracker.replace_all(merged, warnings);
    warn_all(s, warnings);
    set(s, tracker.objectives());
    return true;
  }

  // Returns true when the watch was abandoned as silent (KubeReader::kWatchSilenceGrace).
  bool watch(Source& s, ObjectiveTracker& tracker, bool& relist, std::string& error) {
    const std::string target = collection(s) + "?watch=1&allowWatchBookmarks=true" +
                               "&resourceVersion=" + url_encode(tracker.resource_version());
    const auto [status, silent] = s.reader->watch(
        target, options.watch_timeout,
        [&](const Json& event) {
          std::vector<std::string> warnings;
          const auto outcome = tracker.apply(event, warnings);
          warn_all(s, warnings);
          switch (outcome) {
            case ObjectiveTracker::Outcome::kChanged:
              set(s, tracker.objectives());
              break;
            case ObjectiveTracker::Outcome::kRelist:
              relist = true;
              return false;
            case ObjectiveTracker::Outcome::kUnchanged:
              break;
          }
          return true;
        },
        error);
    if (silent) {
      error = s.group_version + " InferenceObjective watch: " + error;
    } else if (status == 410) {
      relist = true;
    } else if (status != 200 && error.empty()) {
      error = s.group_version + " InferenceObjective watch: HTTP " + std::to_string(status);
    }
    return silent;
  }

  // The group is not served (404) or not readable (403): said once, its objectives dropped.
  void unserved(Source& s, int status) {
    if (s.unserved_status != status) {
      s.unserved_status = status;
      if (status == 404) {
        spdlog::info(
            "discovery: the API server does not serve {} InferenceObjectives (no such "
            "CRD); checking again every {} s",
            s.group_version, options.unserved_recheck.count());
      } else {
        spdlog::warn(
            "discovery: the EPP may not list {} InferenceObjectives in {} (HTTP 403: "
            "its Role needs get/list/watch on inferenceobjectives); checking again "
            "every {} s",
            s.group_version, options.pool_namespace, options.unserved_recheck.count());
      }
    }
    set(s, {});
  }

  void loop(Source& s) {
    std::string group;
    while (!stopping && (group = options.pool_group ? options.pool_group() : "").empty()) {
      back_off(kPoolGroupPoll);  // poolRef.group is compared with the pool's group
    }
    ObjectiveTracker tracker(options.pool_name, group);
    auto backoff = kFirstBackoff;
    bool relist = true;
    while (!stopping) {
      std::string error;
      int status = 200;
      bool ok = !relist || list(s, tracker, status, error);
      if (!s.settled) {  // only this thread writes it
        settle(s);
      }
      if (!ok && (status == 404 || status == 403)) {
        unserved(s, status);
        back_off(options.unserved_recheck);
        continue;
      }
      if (ok && relist && s.unserved_status != 0) {
        spdlog::info("discovery: {} InferenceObjectives are served now", s.group_version);
        s.unserved_status = 0;
      }
      relist = relist && !ok;
      const auto watch_start = std::chrono::steady_clock::now();
      bool silent = false;
      if (ok) {
        silent = watch(s, tracker, relist, error);
        ok = error.empty();
      }
      if (stopping) {
        break;
      }
      if (silent) {
        // A broken stream: list again at once; the watch lasted its whole timeout, so there is
        // no tight loop for the back-off to slow.
        spdlog::warn("discovery: {}; listing them again", error);
        relist = true;
        backoff = kFirstBackoff;
        continue;
      }
      if (ok && std::chrono::steady_clock::now() - watch_start > kShortestWatch) {
        backoff = kFirstBackoff;
        continue;
      }
      if (ok) {
        error = s.group_version + " InferenceObjective watch ended at once";
      }
      spdlog::warn("discovery: {}; retrying in {} ms", error, backoff.count());
      relist = true;
      back_off(backoff);
      backoff = std::min(backoff * 2, kLongestBackoff);
    }
  }

  ObjectiveDiscoveryOptions options;
  Publish publish;
  std::atomic<bool> stopping{false};
  std::mutex mu;                                           // sources' `current`, the back-off waits
  std::condition_variable cv;                              // stopping
  std::mutex publish_mu;                                   // one publish at a time, in order
  std::optional<std::vector<ClusterObjective>> published;  // guarded by publish_mu
  std::vector<std::unique_ptr<Source>> sources;
};

ObjectiveDiscovery::ObjectiveDiscovery(ObjectiveDiscoveryOptions options, Publish publish)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(publish))) {}

ObjectiveDiscovery::~ObjectiveDiscovery() {
  stop();
}

void ObjectiveDiscovery::start() {
  for (auto& s : impl_->sources) {
    if (!s->thread.joinable()) {
      Impl::Source* source = s.get();
      s->thread = named_thread("epp-objectives", [this, source] { impl_->loop(*source); });
    }
  }
}

void ObjectiveDiscovery::stop() {
  {
    std::lock_guard lock(impl_->mu);
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
  for (auto& s : impl_->sources) {
    if (s->thread.joinable()) {
      s->thread.join();
    }
  }
}

}  // namespace llmd::epp::discovery
