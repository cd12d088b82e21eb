#include "epp/discovery/leader_elector.h"

#include "common/util/thread_name.h"

#include <ctime>
#include <random>
#include <stdexcept>

#include <spdlog/spdlog.h>

namespace llmd::epp::discovery {
namespace {

using Json = nlohmann::json;
using Clock = LeaderElection::Clock;

// client-go's JitterFactor for a candidate's wait between attempts to acquire.
constexpr double kJitterFactor = 1.2;
constexpr std::size_t kMaxLeaseBytes = 1024 * 1024;

std::string json_string(const Json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

int64_t json_integer(const Json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
}

double seconds(std::chrono::nanoseconds d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

std::string LeaderElectionConfig::validate() const {
  if (identity.empty()) {
    return "leader election: no identity (set POD_NAME or --leader-elect-identity)";
  }
  if (lease_name.empty()) {
    return "leader election: no Lease name (--leader-elect-lease-name)";
  }
  if (lease_namespace.empty()) {
    return "leader election: no Lease namespace (--leader-elect-lease-namespace, "
           "--pool-namespace, or the service account's namespace file)";
  }
  if (lease_duration.count() < 1) {
    return "leaderElection.leaseDurationSeconds must be at least 1";
  }
  if (renew_deadline.count() <= 0 || retry_period.count() <= 0) {
    return "leaderElection.renewDeadlineSeconds and retryPeriodSeconds must be > 0";
  }
  // A leader must give up before a standby may take the Lease.
  if (!(renew_deadline < lease_duration)) {
    return "leaderElection.leaseDurationSeconds must be greater than renewDeadlineSeconds";
  }
  // A leader must be able to try more than once within its deadline.
  if (!(kJitterFactor * static_cast<double>(retry_period.count()) <
        static_cast<double>(renew_deadline.count()))) {
    return "leaderElection.renewDeadlineSeconds must be greater than 1.2 x retryPeriodSeconds";
  }
  return "";
}

std::string default_leader_identity(const std::string& host) {
  std::random_device entropy;
  std::uniform_int_distribution<int> digit(0, 15);
  std::string id = host + "_";
  for (int i = 0; i < 16; ++i) {
    id += "0123456789abcdef"[digit(entropy)];
  }
  return id;
}

std::string micro_time(std::chrono::system_clock::time_point t) {
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch());
  const std::time_t secs = static_cast<std::time_t>(us.count() / 1000000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char text[64];
  std::snprintf(text, sizeof(text), "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(us.count() % 1000000));
  return text;
}

Json lease_json(const std::string& lease_namespace, const std::string& name,
                const LeaseRecord& record, const std::string& resource_version) {
  Json metadata = {{"name", name}, {"namespace", lease_namespace}};
  if (!resource_version.empty()) {
    metadata["resourceVersion"] = resource_version;
  }
  Json spec = {{"leaseDurationSeconds", record.lease_duration_seconds},
               {"acquireTime", record.acquire_time},
               {"renewTime", record.renew_time},
               {"leaseTransitions", record.transitions}};
  if (!record.holder.empty()) {
    spec["holderIdentity"] = record.holder;  // omitted when released, as client-go does
  }
  return Json{{"apiVersion", "coordination.k8s.io/v1"},
              {"kind", "Lease"},
              {"metadata", std::move(metadata)},
              {"spec", std::move(spec)}};
}

std::optional<StoredLease> parse_lease(const Json& object) {
  if (!object.is_object()) {
    return std::nullopt;
  }
  const Json metadata = object.value("metadata", Json::object());
  if (!metadata.is_object() || json_string(metadata, "resourceVersion").empty()) {
    return std::nullopt;
  }
  StoredLease lease;
  lease.resource_version = json_string(metadata, "resourceVersion");
  const Json spec = object.value("spec", Json::object());
  if (spec.is_object()) {
    lease.record.holder = json_string(spec, "holderIdentity");
    lease.record.lease_duration_seconds = json_integer(spec, "leaseDurationSeconds");
    lease.record.acquire_time = json_string(spec, "acquireTime");
    lease.record.renew_time = json_string(spec, "renewTime");
    lease.record.transitions = json_integer(spec, "leaseTransitions");
  }
  return lease;
}

LeaderElection::LeaderElection(LeaderElectionConfig config) : config_(std::move(config)) {
  if (auto error = config_.validate(); !error.empty()) {
    throw std::invalid_argument(error);
  }
}

void LeaderElection::observe(const StoredLease& lease, Clock::time_point now) {
  // Any write (a renewal changes renewTime and the resourceVersion) restarts the lease's
  // duration on this candidate's clock.
  if (!observed_ || !(observed_->record == lease.record) ||
      observed_->resource_version != lease.resource_version) {
    observed_ = lease;
    observed_time_ = now;
  }
}

std::optional<LeaderElection::Write> LeaderElection::plan(
    const std::optional<StoredLease>& read, Clock::time_point now,
    std::chrono::system_clock::time_point wall_now) {
  const std::string stamp = micro_time(wall_now);
  if (!read) {
    // Nobody holds a Lease that does not exist (deleted under a leader too: it leads again
    // only once its create succeeds).
    observed_.reset();
    renewed_at_.reset();
    return Write{
        true, LeaseRecord{config_.identity, config_.lease_duration.count(), stamp, stamp, 0}, ""};
  }
  observe(*read, now);
  const LeaseRecord& held = read->record;
  const bool mine = held.holder == config_.identity;
  if (!mine) {
    renewed_at_.reset();  // another candidate took it: this one leads no longer
    const auto valid_until = observed_time_ + std::chrono::seconds(held.lease_duration_seconds);
    if (!held.holder.empty() && now < valid_until) {
      return std::nullopt;
    }
  }
  LeaseRecord next = held;
  next.holder = config_.identity;
  next.lease_duration_seconds = config_.lease_duration.count();
  next.renew_time = stamp;
  if (!mine) {
    next.acquire_time = stamp;
    next.transitions = held.transitions + 1;
  }
  return Write{false, std::move(next), read->resource_version};
}

void LeaderElection::written(const StoredLease& stored, Clock::time_point attempt_start,
                             Clock::time_point now) {
  observe(stored, now);
  if (stored.record.holder == config_.identity && (!renewed_at_ || *renewed_at_ < attempt_start)) {
    renewed_at_ = attempt_start;
  }
}

std::optional<LeaderElection::Write> LeaderElection::release(
    std::chrono::system_clock::time_point wall_now) {
  renewed_at_.reset();
  if (!observed_ || observed_->record.holder != config_.identity) {
    return std::nullopt;
  }
  // client-go's release: no holder, a 1 s duration, the transitions kept.
  LeaseRecord next = observed_->record;
  next.holder.clear();
  next.lease_duration_seconds = 1;
  next.acquire_time = next.renew_time = micro_time(wall_now);
  return Write{false, std::move(next), observed_->resource_version};
}

std::optional<Clock::time_point> LeaderElection::leading_until() const {
  if (!renewed_at_) {
    return std::nullopt;
  }
  return *renewed_at_ + config_.renew_deadline;
}

bool LeaderElection::leading(Clock::time_point now) const {
  const auto until = leading_until();
  return until && now < *until;
}

// --- LeaderElector ---

LeaderElector::LeaderElector(LeaderElectionConfig config, const KubeApiOptions& api)
    : lease_path_("/apis/coordination.k8s.io/v1/namespaces/" + config.lease_namespace + "/leases"),
      client_(api),
      election_(std::move(config)) {
  // A Lease is tiny: an answer slower than half the deadline is as good as none, and the
  // thread must come back in time to report the end of its leadership.
  const auto bound =
      std::max(std::chrono::milliseconds(100), election_.config().renew_deadline / 2);
  timeouts_.io = bound;
  timeouts_.body_read = bound;
}

LeaderElector::~LeaderElector() {
  stop();
}

void LeaderElector::start() {
  if (thread_.joinable()) {
    return;
  }
  const auto& c = election_.config();
  spdlog::info(
      "leader election: {} campaigns for Lease {}/{} (duration {} s, renew deadline {} "
      "s, retry period {} s)",
      c.identity, c.lease_namespace, c.lease_name, c.lease_duration.count(),
      seconds(c.renew_deadline), seconds(c.retry_period));
  thread_ = named_thread("epp-leader", [this] { loop(); });
}

void LeaderElector::stop() {
  {
    std::unique_lock lock(mu_);
    stopping_ = true;
    leading_until_ns_ = 0;  // stops serving now; the thread hands the Lease over
    cv_.notify_all();
    // An attempt in progress may wait for an unreachable API server (up to its timeouts, per
    // step): past the renew deadline the hand-over is given up so that shutdown stays bounded.
    if (thread_.joinable() &&
        !cv_.wait_for(lock, election_.config().renew_deadline, [this] { return finished_; })) {
      client_.interrupt();
    }
  }
  if (thread_.joinable()) {
    thread_.join();
  }
}

bool LeaderElector::leading() const {
  return Clock::now().time_since_epoch().count() < leading_until_ns_.load();
}

std::string LeaderElector::leader() const {
  std::lock_guard lock(mu_);
  return election_.observed_holder();
}

void LeaderElector::loop() {
  std::minstd_rand rng(std::random_device{}());
  std::uniform_real_distribution<double> jitter(0.0, kJitterFactor);
  const auto retry = election_.config().retry_period;
  while (!stopping_) {
    attempt();
    report(Clock::now());
    // A leader renews on the period; standbys spread their attempts (client-go's jitter).
    const auto wait =
        reported_leading_
            ? retry
            : std::chrono::duration_cast<std::chrono::milliseconds>(retry * (1.0 + jitter(rng)));
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, wait, [this] { return stopping_.load(); });
  }
  hand_over();
  std::lock_guard lock(mu_);
  finished_ = true;
  cv_.notify_all();
}

void LeaderElector::attempt() {
  const auto& c = election_.config();
  const auto start = Clock::now();
  auto warn_once = [this](const std::string& error) {
    if (error != last_error_) {
      spdlog::warn("leader election: {}", error);
      last_error_ = error;
    } else {
      spdlog::debug("leader election: {}", error);
    }
  };
  KubeJsonAnswer got = client_.request_json(KubeMethod::kGet, lease_path_ + "/" + c.lease_name, "",
                                            timeouts_, kMaxLeaseBytes);
  std::optional<StoredLease> read;
  if (got.status == 200) {
    read = parse_lease(got.body);
    if (!read) {
      warn_once("Lease " + c.lease_namespace + "/" + c.lease_name + ": not a Lease object");
      return;
    }
  } else if (got.status != 404) {
    warn_once("reading Lease " + c.lease_namespace + "/" + c.lease_name + ": " +
              (got.error.empty() ? "HTTP " + std::to_string(got.status) : got.error));
    return;
  }
  std::optional<LeaderElection::Write> write;
  {
    std::lock_guard lock(mu_);
    write = election_.plan(read, Clock::now(), std::chrono::system_clock::now());
  }
  if (!write) {
    last_error_.clear();
    return;  // held by another replica
  }
  const std::string body =
      lease_json(c.lease_namespace, c.lease_name, write->record, write->resource_version).dump();
  KubeJsonAnswer put =
      write->create
          ? client_.request_json(KubeMethod::kPost, lease_path_, body, timeouts_, kMaxLeaseBytes)
          : client_.request_json(KubeMethod::kPut, lease_path_ + "/" + c.lease_name, body,
                                 timeouts_, kMaxLeaseBytes);
  if (put.status == 409) {
    // Another replica wrote first (create or update): it wins; read again next time.
    spdlog::debug("leader election: lost the race for Lease {}/{}", c.lease_namespace,
                  c.lease_name);
    last_error_.clear();
    return;
  }
  if (put.status != 200 && put.status != 201) {
    warn_once(std::string(write->create ? "creating" : "updating") + " Lease " + c.lease_namespace +
              "/" + c.lease_name + ": " +
              (put.error.empty() ? "HTTP " + std::to_string(put.status) : put.error));
    return;
  }
  auto stored = parse_lease(put.body);
  if (!stored) {
    warn_once("the API server's answer to a Lease write is not a Lease");
    return;
  }
  last_error_.clear();
  std::lock_guard lock(mu_);
  election_.written(*stored, start, Clock::now());
}

void LeaderElector::report(Clock::time_point now) {
  bool leading_now = false;
  std::string holder;
  {
    std::lock_guard lock(mu_);
    const auto until = election_.leading_until();
    leading_until_ns_ = until ? until->time_since_epoch().count() : 0;
    leading_now = election_.leading(now);
    holder = election_.observed_holder();
  }
  if (stopping_) {
    leading_until_ns_ = 0;  // stop() may have run between the store above and here
    return;
  }
  const auto& c = election_.config();
  if (leading_now && !reported_leading_) {
    spdlog::info("leader election: {} is now the leader (Lease {}/{}): serving", c.identity,
                 c.lease_namespace, c.lease_name);
  } else if (!leading_now && reported_leading_) {
    spdlog::warn(
        "leader election: {} stopped leading (no renewal within {} s, or another "
        "replica holds the Lease): standing by",
        c.identity, seconds(c.renew_deadline));
  }
  if (!leading_now && holder != reported_holder_) {
    spdlog::info("leader election: the leader is {}", holder.empty() ? "nobody" : holder);
  }
  reported_leading_ = leading_now;
  reported_holder_ = holder;
}

void LeaderElector::hand_over() {
  std::optional<LeaderElection::Write> write;
  {
    std::lock_guard lock(mu_);
    write = election_.release(std::chrono::system_clock::now());
  }
  leading_until_ns_ = 0;
  if (!write) {
    return;
  }
  const auto& c = election_.config();
  KubeJsonAnswer put = client_.request_json(
      KubeMethod::kPut, lease_path_ + "/" + c.lease_name,
      lease_json(c.lease_namespace, c.lease_name, write->record, write->resource_version).dump(),
      timeouts_, kMaxLeaseBytes);
  if (put.status == 200) {
    spdlog::info("leader election: {} released Lease {}/{}", c.identity, c.lease_namespace,
                 c.lease_name);
  } else {
    spdlog::warn(
        "leader election: releasing Lease {}/{}: {} (a standby takes over when it "
        "expires)",
        c.lease_namespace, c.lease_name,
        put.error.empty() ? "HTTP " + std::to_string(put.status) : put.error);
  }
}

}  // namespace llmd::epp::discovery
