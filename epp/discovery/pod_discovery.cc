#include "epp/discovery/pod_discovery.h"

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
#include "epp/discovery/pod_tracker.h"

namespace llmd::epp::discovery {
namespace {

using Json = nlohmann::json;

constexpr std::size_t kMaxBody = 64 * 1024 * 1024;  // one LIST answer
constexpr std::size_t kMaxLine = 4 * 1024 * 1024;   // one watch event
constexpr auto kIoTimeout = std::chrono::seconds(10);

std::string trimmed(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) {
    s.pop_back();
  }
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) {
    s.erase(s.begin());
  }
  return s;
}

std::string url_encode(const std::string& s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

// "k=v,k2=v2": as logged; selector_query() is its URL-encoded form.
std::string selector_text(const std::map<std::string, std::string>& selector) {
  std::string s;
  for (const auto& [k, v] : selector) {
    s += (s.empty() ? "" : ",") + k + "=" + v;
  }
  return s;
}

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
    const std::string part = trimmed(text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
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

struct PodDiscovery::Impl {
  Impl(DiscoveryOptions o, Publish p)
      : options(std::move(o)),
        publish(std::move(p)),
        client(KubeApiOptions{options.api_url, options.token_file, options.ca_file}) {
    if (options.pool_name.empty() && options.selector.empty()) {
      throw std::invalid_argument("Kubernetes discovery needs --pool-name or --pool-selector");
    }
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
  }

  // --- one HTTP exchange on the discovery thread, interruptible by stop() ---

  // One GET; `on_body(bytes)` gets the body as it arrives and returns false to stop reading.
  // Returns the status (0 on failure, `error` says why).
  int get(const std::string& target, std::chrono::seconds read_timeout,
          const std::function<bool(std::string_view)>& on_body, std::string& error) {
    KubeTimeouts timeouts;
    timeouts.body_read = read_timeout;
    return client.request(KubeMethod::kGet, target, "", timeouts, on_body, error);
  }

  std::optional<Json> get_json(const std::string& target, int& status, std::string& error) {
    std::string body;
    status = get(target, kIoTimeout, [&](std::string_view b) {
      if (body.size() + b.size() > kMaxBody) {
        error = "answer larger than " + std::to_string(kMaxBody) + " bytes";
        return false;
      }
      body.append(b);
      return true;
    }, error);
    if (status != 200 || !error.empty()) {
      return std::nullopt;
    }
    try {
      return Json::parse(body);
    } catch (const std::exception& e) {
      error = std::string("bad JSON: ") + e.what();
      return std::nullopt;
    }
  }

  // --- the discovery loop ---

  // Reads the InferencePool (when named): its selector and target port. False on failure.
  bool read_pool(std::string& error) {
    if (options.pool_name.empty()) {
      selector = options.selector;
      ports = {options.target_port};
      return true;
    }
    const std::string v1 = "/apis/inference.networking.k8s.io/v1/namespaces/" + namespace_ +
                           "/inferencepools/" + options.pool_name;
    const std::string alpha = "/apis/inference.networking.x-k8s.io/v1alpha2/namespaces/" +
                              namespace_ + "/inferencepools/" + options.pool_name;
    int status = 0;
    auto pool = get_json(v1, status, error);
    if (!pool && status == 404) {
      error.clear();
      pool = get_json(alpha, status, error);
    }
    if (!pool) {
      error = "InferencePool " + namespace_ + "/" + options.pool_name + ": " +
              (error.empty() ? "HTTP " + std::to_string(status) : error);
      return false;
    }
    const Json spec = pool->value("spec", Json::object());
    std::map<std::string, std::string> next;
    Json labels = spec.value("selector", Json::object());
    if (labels.contains("matchLabels")) {
      labels = labels["matchLabels"];  // v1
    }
    if (labels.is_object()) {
      for (const auto& [k, v] : labels.items()) {
        if (v.is_string()) {
          next[k] = v.get<std::string>();
        }
      }
    }
    // v1 lists one port per serving process of a pod (e.g. a data-parallel rank): each is an
    // endpoint of its own. v1alpha2 has one targetPortNumber.
    std::vector<uint16_t> next_ports;
    if (auto listed = spec.find("targetPorts"); listed != spec.end() && listed->is_array()) {
      for (const auto& p : *listed) {
        const int number = p.is_object() ? p.value("number", 0) : 0;
        if (number > 0 && number <= 65535) {
          next_ports.push_back(static_cast<uint16_t>(number));
        }
      }
    } else if (spec.contains("targetPortNumber")) {
      next_ports.push_back(
          static_cast<uint16_t>(spec.value("targetPortNumber", int{options.target_port})));
    }
    if (next_ports.empty()) {
      next_ports.push_back(options.target_port);
    }
    if (next.empty()) {
      error = "InferencePool " + options.pool_name + " has no selector";
      return false;
    }
    if (next != selector || next_ports != ports) {
      std::string port_list;
      for (auto p : next_ports) {
        port_list += (port_list.empty() ? "" : ", ") + std::to_string(p);
      }
      spdlog::info("discovery: InferencePool {}/{} selects {} on port{} {}", namespace_,
                   options.pool_name, selector_text(next), next_ports.size() > 1 ? "s" : "",
                   port_list);
      relist = true;
    }
    selector = std::move(next);
    ports = std::move(next_ports);
    return true;
  }

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
                 added.empty() ? "" : "; added" + added, removed.empty() ? "" : "; removed" + removed);
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
      auto page = get_json("/api/v1/namespaces/" + namespace_ + "/pods?labelSelector=" +
                               selector_query(selector) + "&limit=" + std::to_string(page_size) +
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
      token = meta.is_object() && meta.value("continue", Json()).is_string()
                  ? meta["continue"].get<std::string>()
                  : std::string();
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
    relist = false;
    return true;
  }

  // Watches from the tracker's resourceVersion until the watch ends, breaks or asks to re-list.
  void watch(PodTracker& tracker, std::string& error) {
    std::string pending;
    const std::string target = "/api/v1/namespaces/" + namespace_ + "/pods?labelSelector=" +
                               selector_query(selector) + "&watch=1&allowWatchBookmarks=true" +
                               "&resourceVersion=" + url_encode(tracker.resource_version()) +
                               "&timeoutSeconds=" + std::to_string(options.watch_timeout.count());
    const int status = get(target, options.watch_timeout + std::chrono::seconds(30),
                           [&](std::string_view bytes) {
      pending.append(bytes);
      for (auto nl = pending.find('\n'); nl != std::string::npos; nl = pending.find('\n')) {
        const std::string line = pending.substr(0, nl);
        pending.erase(0, nl + 1);
        if (trimmed(line).empty()) {
          continue;
        }
        Json event;
        try {
          event = Json::parse(line);
        } catch (const std::exception&) {
          relist = true;
          return false;
        }
        switch (tracker.apply(event)) {
          case PodTracker::Outcome::kChanged:
            announce(tracker.endpoints());
            break;
          case PodTracker::Outcome::kRelist:
            spdlog::info("discovery: watch asks for a new list ({})",
                         event.value("object", Json::object()).value("message", "event"));
            relist = true;
            return false;
          case PodTracker::Outcome::kUnchanged:
            break;
        }
      }
      if (pending.size() > kMaxLine) {
        relist = true;
        return false;
      }
      return !stopping;
    }, error);
    if (status == 410) {
      relist = true;
    } else if (status != 200 && error.empty()) {
      error = "pod watch: HTTP " + std::to_string(status);
    }
  }

  void loop() {
    PodTracker tracker(options.target_port);
    auto backoff = std::chrono::milliseconds(1000);
    relist = true;
    while (!stopping) {
      std::string error;
      bool ok = read_pool(error);
      if (ok && relist) {
        ok = list(tracker, error);
      }
      const auto watch_start = std::chrono::steady_clock::now();
      if (ok) {
        watch(tracker, error);
        ok = error.empty() || stopping;
      }
      if (stopping) {
        break;
      }
      if (ok && std::chrono::steady_clock::now() - watch_start > std::chrono::seconds(1)) {
        backoff = std::chrono::milliseconds(1000);
        continue;
      }
      if (ok) {
        // A watch the server ended at once (a proxy's short timeout, an overloaded API server):
        // not a reason to reconnect in a tight loop.
        error = "the pod watch ended at once";
      }
      spdlog::warn("discovery: {}; retrying in {} ms", error, backoff.count());
      relist = true;
      std::unique_lock lock(mu);
      cv.wait_for(lock, backoff, [this] { return stopping.load(); });
      backoff = std::min(backoff * 2, std::chrono::milliseconds(10000));
    }
  }

  DiscoveryOptions options;
  Publish publish;
  std::string namespace_;
  KubeApiClient client;
  std::atomic<bool> stopping{false};
  std::mutex mu;
  std::condition_variable cv;
  std::thread thread;
  // Loop state (discovery thread only).
  std::map<std::string, std::string> selector;
  std::vector<uint16_t> ports;  // the pods' serving ports, one endpoint each
  bool relist = true;
  std::map<std::string, std::string> published;  // name -> address last published
};

PodDiscovery::PodDiscovery(DiscoveryOptions options, Publish publish)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(publish))) {}

PodDiscovery::~PodDiscovery() { stop(); }

void PodDiscovery::start() {
  if (impl_->thread.joinable()) {
    return;
  }
  impl_->thread = std::thread([this] { impl_->loop(); });
}

void PodDiscovery::stop() {
  {
    std::lock_guard lock(impl_->mu);
    impl_->stopping = true;
  }
  impl_->client.interrupt();  // ends a request or watch in progress
  impl_->cv.notify_all();
  if (impl_->thread.joinable()) {
    impl_->thread.join();
  }
}

}  // namespace llmd::epp::discovery
