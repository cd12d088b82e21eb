#include "epp/discovery/pod_discovery.h"

#include "common/util/thread_name.h"

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/util/files.h"
#include "epp/discovery/kube_api_client.h"
#include "epp/discovery/kube_reader.h"
#include "epp/discovery/pod_tracker.h"
#include "epp/discovery/pool_spec.h"

namespace llmd::epp::discovery {
namespace {

using Json = nlohmann::json;

// The URL query form of selector_text().
std::string selector_query(const std::map<std::string, std::string>& selector) {
  return url_encode(selector_text(selector));
}

// Pods asked for per list page: the API server may answer fewer, with a continue token.
constexpr std::size_t kListPageSize = 500;

}  // namespace

std::map<std::string, std::string> parse_selector(const std::string& text) {
  std::map<std::string, std::string> out;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const auto comma = text.find(',', pos);
    const std::string part =
        trimmed(text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
    if (!part.empty()) {
      const auto eq = part.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == part.size()) {
        throw std::invalid_argument("--pool-selector: expected key=value, got '" + part + "'");
      }
      out[trimmed(part.substr(0, eq))] = trimmed(part.substr(eq + 1));
    }
    if (comma == std::string::npos) {
      break;
    }
    pos = comma + 1;
  }
  return out;
}

namespace {

// A watch that ends sooner than this after it began (a proxy's short timeout, an overloaded API
// server) is retried after a back-off rather than in a tight loop.
constexpr auto kShortestWatch = std::chrono::seconds(1);
constexpr auto kFirstBackoff = std::chrono::milliseconds(1000);
constexpr auto kLongestBackoff = std::chrono::milliseconds(10000);

}  // namespace

// Two loops, each on a thread of its own with its own KubeReader:
// - the pool loop (only with an InferencePool) GETs the pool, then watches it; every spec it
//   reads goes through set_pool_spec(), which bumps pool_generation when the selector or the
//   ports changed;
// - the pod loop lists and watches the pods of the current spec. A new pool_generation
//   interrupts its list or watch at once (its client's `interrupted`), and it lists again with
//   the new spec: that is how a pool edit moves traffic within a second, not at the next watch
//   timeout.
struct PodDiscovery::Impl {
  Impl(DiscoveryOptions o, Publish p) : options(std::move(o)), publish(std::move(p)) {
    if (options.pool_name.empty() && options.selector.empty()) {
      throw std::invalid_argument("Kubernetes discovery needs --pool-name or --pool-selector");
    }
    const KubeApiOptions api{options.api_url, options.token_file, options.ca_file};
    namespace_ = options.pool_namespace;
    if (namespace_.empty()) {
      if (auto ns = util::read_file(options.namespace_file)) {
        namespace_ = trimmed(*ns);
      }
    }
    if (namespace_.empty()) {
      throw std::invalid_argument("Kubernetes discovery: no --pool-namespace and no " +
                                  options.namespace_file);
    }
    pods_api = std::make_unique<KubeReader>(
        api, [this] { return stopping.load() || pool_generation.load() != listed_generation; });
    if (options.pool_name.empty()) {
      pool_spec = PoolSpec{options.selector, options.target_ports.empty()
                                                 ? std::vector<uint16_t>{options.target_port}
                                                 : options.target_ports};
      pool_generation = 1;
    } else {
      pool_api = std::make_unique<KubeReader>(api, [this] { return stopping.load(); });
    }
  }

  std::string pool_id() const { return namespace_ + "/" + options.pool_name; }

  // Waits `delay` unless stopping (or `wake` turns true) first.
  void back_off(std::chrono::milliseconds delay, const std::function<bool()>& wake) {
    std::unique_lock lock(mu);
    cv.wait_for(lock, delay, [&] { return stopping.load() || wake(); });
  }

  // --- the InferencePool (pool thread) ---

  std::string pool_collection(bool v1) const {
    return "/apis/" + std::string(v1 ? kPoolGroupV1 : kPoolGroupV1Alpha2) +
           (v1 ? "/v1" : "/v1alpha2") + "/namespaces/" + namespace_ + "/inferencepools";
  }

  // A spec read from the API server; logs and publishes it to the pod loop when it differs.
  void set_pool_spec(PoolSpec spec) {
    {
      std::lock_guard lock(mu);
      if (pool_spec && *pool_spec == spec) {
        return;
      }
      if (pool_spec) {
        spdlog::info("discovery: InferencePool {} changed: {}; listing the pods it selects now",
                     pool_id(), describe_change(*pool_spec, spec));
      } else {
        spdlog::info("discovery: InferencePool {} {}", pool_id(), describe(spec));
      }
      pool_spec = std::move(spec);
      ++pool_generation;
    }
    cv.notify_all();
  }

  bool take_pool(const Json& pool, std::string& error) {
    auto spec = pool_spec_of(pool, options.target_port, error);
    if (!spec) {
      error = "InferencePool " + pool_id() + ": " + error;
      return false;
    }
    set_pool_spec(std::move(*spec));
    return true;
  }

  // GETs the pool (v1, else v1alpha2; the group that answers is the one watched) and takes its
  // spec. Sets `resource_version`, where its watch starts.
  bool read_pool(std::string& resource_version, std::string& error) {
    int status = 0;
    const bool v1_only = options.pool_group == kPoolGroupV1;
    const bool v1alpha2_only = options.pool_group == kPoolGroupV1Alpha2;
    watched_collection = pool_collection(!v1alpha2_only);
    auto pool = pool_api->get_json(watched_collection + "/" + options.pool_name, status, error);
    if (!pool && status == 404 && !v1_only && !v1alpha2_only) {
      error.clear();
      watched_collection = pool_collection(false);
      pool = pool_api->get_json(watched_collection + "/" + options.pool_name, status, error);
    }
    if (!pool) {
      error = "InferencePool " + pool_id() + ": " +
              (error.empty() ? "HTTP " + std::to_string(status) : error);
      return false;
    }
    if (!take_pool(*pool, error)) {
      return false;
    }
    {
      std::lock_guard lock(mu);
      pool_group = watched_collection == pool_collection(true) ? kPoolGroupV1 : kPoolGroupV1Alpha2;
    }
    resource_version = resource_version_of(*pool);
    return true;
  }

  // Watches the pool (a watch on its collection, narrowed to its name) from `resource_version`,
  // which follows the events, until the watch ends. On failure `error` says why and
  // `resource_version` is cleared: the pool is read again. Returns true when the watch was
  // abandoned as silent (KubeReader::kWatchSilenceGrace).
  bool watch_pool(std::string& resource_version, std::string& error) {
    const std::string target =
        watched_collection + "?fieldSelector=" + url_encode("metadata.name=" + options.pool_name) +
        "&watch=1&allowWatchBookmarks=true&resourceVersion=" + url_encode(resource_version);
    const auto [status, silent] = pool_api->watch(
        target, options.watch_timeout,
        [&](const Json& event) {
          const std::string type = string_at(event, "type");
          const Json object = event.value("object", Json::object());
          if (type == "ERROR") {  // 410 Gone (too old a resourceVersion) or worse: read again
            error = "InferencePool watch: " + string_at(object, "message");
            return false;
          }
          if (auto rv = resource_version_of(object); !rv.empty()) {
            resource_version = rv;
          }
          if (type == "ADDED" || type == "MODIFIED") {
            std::string unusable;
            if (!take_pool(object, unusable)) {
              spdlog::warn("discovery: {}; the pods it selected before stay endpoints", unusable);
            }
          } else if (type == "DELETED") {
            // A pool deleted and created again (kubectl replace, a chart reinstall) should not
            // drop traffic; while it is gone no route sends requests through it anyway.
            spdlog::warn(
                "discovery: InferencePool {} was deleted; the pods it selected stay "
                "endpoints until it is created again",
                pool_id());
          }
          return true;
        },
        error);
    if (silent) {
      error = "InferencePool watch: " + error;
    } else if (status != 200 && error.empty()) {
      error = "InferencePool watch: HTTP " + std::to_string(status);
    }
    if (!error.empty()) {
      resource_version.clear();
    }
    return silent;
  }

  void pool_loop() {
    std::string resource_version;  // "" = read the pool
    auto backoff = kFirstBackoff;
    while (!stopping) {
      std::string error;
      bool ok = !resource_version.empty() || read_pool(resource_version, error);
      const auto watch_start = std::chrono::steady_clock::now();
      bool silent = false;
      if (ok) {
        silent = watch_pool(resource_version, error);
        ok = error.empty();
      }
      if (stopping) {
        break;
      }
      if (silent) {
        // Read again at once, without the back-off: the watch lasted its whole timeout, so
        // there is no tight loop to slow, and waiting would only delay an edit further.
        spdlog::warn("discovery: {}; reading the InferencePool again", error);
        backoff = kFirstBackoff;
        continue;
      }
      if (ok && std::chrono::steady_clock::now() - watch_start > kShortestWatch) {
        backoff = kFirstBackoff;
        continue;  // the server ended the watch (timeoutSeconds): resume it
      }
      if (ok) {
        error = "the InferencePool watch ended at once";
      }
      spdlog::warn("discovery: {}; retrying in {} ms", error, backoff.count());
      resource_version.clear();
      back_off(backoff, [] { return false; });
      backoff = std::min(backoff * 2, kLongestBackoff);
    }
  }

  // --- the pods (pod thread) ---

  void announce(const std::vector<PodConfig>& endpoints) {
    std::map<std::string, std::string> now;
    for (const auto& p : endpoints) {
      now[p.name] = p.address;
    }
    std::string added, removed;
    for (const auto& [name, address] : now) {
      if (!published.count(name) || published[name] != address) {
        added += " " + name + "=" + address;
      }
    }
    for (const auto& [name, address] : published) {
      if (!now.count(name)) {
        removed += " " + name;
      }
    }
    spdlog::info("discovery: {} ready endpoints{}{}", endpoints.size(),
                 added.empty() ? "" : "; added" + added,
                 removed.empty() ? "" : "; removed" + removed);
    published = std::move(now);
    publish(endpoints);
  }

  // Lists the selected pods page by page (following `continue`, as the API server pages large
  // lists whatever limit is asked), up to max_pods.
  bool list(PodTracker& tracker, std::string& error) {
    Json merged = {{"items", Json::array()}, {"metadata", Json::object()}};
    std::string token;
    int pages = 0;
    do {
      int status = 0;
      const std::size_t page_size = std::min(kListPageSize, options.max_pods);
      auto page = pods_api->get_json("/api/v1/namespaces/" + namespace_ +
                                         "/pods?labelSelector=" + selector_query(selector) +
                                         "&limit=" + std::to_string(page_size) +
                                         (token.empty() ? "" : "&continue=" + url_encode(token)),
                                     status, error);
      if (!page || !page->is_object()) {
        // An expired continue token (410) included: the next attempt lists from the start.
        error = "pod list: " + (error.empty() ? "HTTP " + std::to_string(status) : error);
        return false;
      }
      if (auto items = page->find("items"); items != page->end() && items->is_array()) {
        for (auto& item : *items) {
          merged["items"].push_back(std::move(item));
        }
      }
      const Json meta = page->value("metadata", Json::object());
      if (pages++ == 0) {
        merged["metadata"] = meta;  // every page of one list carries its resourceVersion
      }
      token = string_at(meta, "continue");
      if (merged["items"].size() >= options.max_pods && !token.empty()) {
        spdlog::warn("discovery: more than {} pods match {}; the rest are ignored",
                     options.max_pods, selector_text(selector));
        break;
      }
    } while (!token.empty());
    if (pages > 1) {
      spdlog::debug("discovery: pod list in {} pages ({} pods)", pages, merged["items"].size());
    }
    tracker.set_target_ports(ports);
    tracker.replace_all(merged);
    announce(tracker.endpoints());
    return true;
  }

  // Watches from the tracker's resourceVersion until the watch ends, breaks (`error`) or asks
  // for a new list (`relist`). Returns true when it was abandoned as silent
  // (KubeReader::kWatchSilenceGrace; `error` says so).
  bool watch(PodTracker& tracker, bool& relist, std::string& error) {
    const std::string target = "/api/v1/namespaces/" + namespace_ +
                               "/pods?labelSelector=" + selector_query(selector) +
                               "&watch=1&allowWatchBookmarks=true" +
                               "&resourceVersion=" + url_encode(tracker.resource_version());
    const auto [status, silent] = pods_api->watch(
        target, options.watch_timeout,
        [&](const Json& event) {
          switch (tracker.apply(event)) {
            case PodTracker::Outcome::kChanged:
              announce(tracker.endpoints());
              break;
            case PodTracker::Outcome::kRelist:
              spdlog::info("discovery: the pod watch asks for a new list ({})",
                           string_at(event.value("object", Json::object()), "message"));
              relist = true;
              return false;
            case PodTracker::Outcome::kUnchanged:
              break;
          }
          return true;
        },
        error);
    if (silent) {
      error = "pod watch: " + error;
    } else if (status == 410) {
      relist = true;
    } else if (status != 200 && error.empty()) {
      error = "pod watch: HTTP " + std::to_string(status);
    }
    return silent;
  }

  void pod_loop() {
    PodTracker tracker(options.target_port);
    auto backoff = kFirstBackoff;
    bool relist = true;
    while (!stopping) {
      {
        // Nothing to list before the pool has been read.
        std::unique_lock lock(mu);
        cv.wait(lock, [this] { return stopping.load() || pool_spec.has_value(); });
        if (stopping) {
          break;
        }
        if (pool_generation != listed_generation) {
          selector = pool_spec->selector;
          ports = pool_spec->ports;
          listed_generation = pool_generation;
          relist = true;
        }
      }
      std::string error;
      bool ok = !relist || list(tracker, error);
      relist = relist && !ok;
      const auto watch_start = std::chrono::steady_clock::now();
      bool silent = false;
      if (ok) {
        silent = watch(tracker, relist, error);
        ok = error.empty();
      }
      if (stopping) {
        break;
      }
      if (pool_generation != listed_generation) {
        continue;  // interrupted by a pool edit: list what the pool selects now
      }
      if (silent) {
        // A broken stream: list again, at once rather than after the back-off (the watch
        // lasted its whole timeout, so there is no tight loop to slow), which bounds how late
        // an edit behind a silent watch is followed by the watch timeout + 5 s.
        spdlog::warn("discovery: {}; listing the pods again", error);
        relist = true;
        backoff = kFirstBackoff;
        continue;
      }
      if (ok && std::chrono::steady_clock::now() - watch_start > kShortestWatch) {
        backoff = kFirstBackoff;
        continue;
      }
      if (ok) {
        error = "the pod watch ended at once";
      }
      spdlog::warn("discovery: {}; retrying in {} ms", error, backoff.count());
      relist = true;
      back_off(backoff, [this] { return pool_generation.load() != listed_generation; });
      backoff = std::min(backoff * 2, kLongestBackoff);
    }
  }

  DiscoveryOptions options;
  Publish publish;
  std::string namespace_;
  std::atomic<bool> stopping{false};
  std::mutex mu;
  std::condition_variable cv;                // stopping, a new pool spec
  std::optional<PoolSpec> pool_spec;         // guarded by mu
  std::string pool_group;                    // guarded by mu; "" until the pool was read
  std::atomic<uint64_t> pool_generation{0};  // bumped (under mu) with each new pool_spec
  std::unique_ptr<KubeReader> pool_api;      // pool thread; null without an InferencePool
  std::unique_ptr<KubeReader> pods_api;      // pod thread
  std::thread pool_thread;
  std::thread pod_thread;
  // Pool loop state (pool thread only).
  std::string watched_collection;  // the InferencePool API group that answered
  // Pod loop state (pod thread only).
  uint64_t listed_generation = 0;  // the pool_spec that selector and ports come from
  std::map<std::string, std::string> selector;
  std::vector<uint16_t> ports;                   // the pods' serving ports, one endpoint each
  std::map<std::string, std::string> published;  // name -> address last published
};

PodDiscovery::PodDiscovery(DiscoveryOptions options, Publish publish)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(publish))) {}

PodDiscovery::~PodDiscovery() {
  stop();
}

std::string PodDiscovery::pool_group() const {
  std::lock_guard lock(impl_->mu);
  return impl_->pool_group;
}

void PodDiscovery::start() {
  if (impl_->pod_thread.joinable()) {
    return;
  }
  if (impl_->pool_api) {
    impl_->pool_thread = named_thread("epp-pool-watch", [this] { impl_->pool_loop(); });
  }
  impl_->pod_thread = named_thread("epp-pod-watch", [this] { impl_->pod_loop(); });
}

void PodDiscovery::stop() {
  {
    std::lock_guard lock(impl_->mu);
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
  for (auto* t : {&impl_->pool_thread, &impl_->pod_thread}) {
    if (t->joinable()) {
      t->join();
    }
  }
}

}  // namespace llmd::epp::discovery
