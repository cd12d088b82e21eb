#include "epp/app/epp_app.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <functional>
#include <list>
#include <optional>
#include <stdexcept>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <prometheus/registry.h>
#include <spdlog/spdlog.h>

#include "common/http/body_budget.h"
#include "common/http/io_workers.h"
#include "common/http/router.h"
#include "common/http/server.h"
#include "common/metrics/exposition.h"
#include "common/util/thread_name.h"
#include "epp/app/config_reloader.h"
#include "epp/app/epp_metrics.h"
#include "epp/app/gie_metrics.h"
#include "epp/app/metrics_auth.h"
#include "epp/app/upstream_scrape.h"
#include "epp/datastore/prefix_index.h"
#include "epp/datastore/scraper.h"
#include "epp/extproc/byte_stream.h"
#include "epp/discovery/objective_discovery.h"
#include "epp/extproc/ext_proc_server.h"
#include "epp/extproc/grpc_server.h"
#include "epp/extproc/health_service.h"
#include "epp/feedback/gie_request_metrics.h"
#include "epp/feedback/model_labels.h"
#include "epp/feedback/request_metrics.h"
#include "epp/plugins/register.h"
#include "epp/predictor_client/in_process_predictions.h"
#include "epp/predictor_client/predictor_client.h"
#include "epp/queue/admission_gate.h"
#include "epp/queue/flow_control_metrics.h"
#include "epp/scheduler/config_loader.h"
#include "epp/scheduler/scheduling_cycle.h"
#include "epp/scheduler/metrics.h"
#include "epp/request/epp_scheduling_port.h"
#include "epp/request/completion_fanout.h"

namespace llmd::epp {

namespace asio = boost::asio;

namespace {

// The defaults the --leader-elect-* flags describe, resolved on this machine.
discovery::LeaderElectionConfig resolve_leader_election(const EppOptions& o,
                                                        const StartupSettings& s) {
  discovery::LeaderElectionConfig lc = o.leader_election;
  lc.lease_duration = s.lease_duration;
  lc.renew_deadline = s.renew_deadline;
  lc.retry_period = s.retry_period;
  if (lc.identity.empty()) {
    char host[256] = {};
    if (gethostname(host, sizeof(host) - 1) != 0) {
      std::snprintf(host, sizeof(host), "epp");
    }
    lc.identity = discovery::default_leader_identity(host);
  }
  if (lc.lease_name.empty()) {
    const std::string& pool = o.discovery.pool_name;
    lc.lease_name = pool.empty() ? "llmd-epp" : "llmd-epp-" + pool;
  }
  if (lc.lease_namespace.empty()) {
    lc.lease_namespace = o.discovery.pool_namespace;
  }
  if (lc.lease_namespace.empty()) {
    lc.lease_namespace =
        discovery::service_account_namespace(discovery::DiscoveryOptions{}.namespace_file);
  }
  return lc;
}

// The health and the metrics server: one thread each, answering /healthz, /readyz, /metrics.
http::ServerOptions admin_server(const std::string& host, uint16_t port, std::string thread) {
  http::ServerOptions ho;
  ho.thread_name = std::move(thread);
  ho.io_threads = 1;
  // Probes and scrapes are answered even while clients hold every descriptor the proxy may use.
  ho.max_connections = 64;
  ho.descriptors_per_connection = 0;
  ho.host = host;
  ho.port = port;
  return ho;
}

// A task run every `period` on the timer thread, counted from the end of its previous run (the
// rhythm of the sleeping loops it replaced), so a slow run delays the next instead of piling up.
struct Periodic {
  Periodic(asio::io_context& io, std::chrono::milliseconds period, std::function<void()> fn)
      : timer(io), period(period), fn(std::move(fn)) {}
  void arm() {
    timer.expires_after(period);
    timer.async_wait([this](const boost::system::error_code& ec) {
      if (!ec) {
        fn();
        arm();
      }
    });
  }
  asio::steady_timer timer;
  const std::chrono::milliseconds period;
  const std::function<void()> fn;
};

// The Gateway API Inference Extension's pool `name` of one of our pools: the pods' `pool`
// label, and for the default pool --pool-name (else "default").
std::function<std::string(const std::string&)> gie_pool_name(const EppOptions& o) {
  std::string fallback = o.discovery.pool_name.empty() ? "default" : o.discovery.pool_name;
  return [fallback](const std::string& pool) { return pool.empty() ? fallback : pool; };
}

// The namespace of the pool's pods (the scheduler's GIE attempts label them with it): with
// Kubernetes discovery --pool-namespace, else the service account's; "" without discovery.
std::string pod_namespace(const EppOptions& o) {
  if (!o.discover()) {
    return "";
  }
  return o.discovery.pool_namespace.empty()
             ? discovery::service_account_namespace(o.discovery.namespace_file)
             : o.discovery.pool_namespace;
}

// Predictor replicas, the models in process, or none (composite scoring).
std::unique_ptr<PredictionSource> make_prediction_source(const EppOptions& o,
                                                         prometheus::Registry& registry) {
  if (o.in_process_predictions) {
    return std::make_unique<predictor_client::InProcessPredictions>(o.in_process, registry);
  }
  if (!o.prediction_server_url.empty()) {
    return std::make_unique<predictor_client::PredictorClient>(o.predictor, registry);
  }
  return nullptr;
}

}  // namespace

struct EppApp::Impl {
  explicit Impl(const EppOptions& o);

  LoadResult load(const EppFileConfig& c);
  std::string apply(const EppFileConfig& next);
  // The file's objectives with the cluster's InferenceObjectives laid over them (timer thread).
  std::shared_ptr<const ObjectiveTable> objectives() const;
  void watch_objectives();
  // nullopt on the leader (or without election), else a standby's answer to every request.
  std::optional<std::string> standby() const;
  // nullopt when this EPP can serve, else why not (/readyz, gRPC readiness).
  std::optional<std::string> not_ready(std::size_t& ready_pods) const;
  void add_admin_routes();
  http::Response metrics_route(http::Request& r);
  std::unique_ptr<extproc::GrpcServer> make_health_server();
  // EppMetricSources::ext_proc_limit_events over the ext_proc server's GrpcCounters.
  std::function<std::vector<std::pair<std::string, uint64_t>>()> ext_proc_limit_events();
  void update_grpc_health();
  void every(std::chrono::milliseconds period, std::function<void()> fn);
  void start();
  void drain();
  void stop();

  const EppOptions options;
  const PodSource pod_source;
  const EppFileConfig file_cfg;  // as loaded at start-up
  prometheus::Registry registry;
  // The proxy's event loops. Before the prediction source: the predictor client calls back on
  // the worker that asked, so the workers run until it is gone (destroyed after it).
  http::IoWorkers workers{options.proxy.io_threads, "epp-worker"};
  SchedulerMetrics sched_metrics{registry};
  PrefixIndex prefix_index;
  std::unique_ptr<PredictionSource> predictions;  // replicas, in process, or none
  PluginRegistry plugins;
  Handle handle{prefix_index, predictions.get(), nullptr, nullptr};
  const LoadResult loaded;
  DecisionLog decision_log;
  SchedulingCycle scheduling_cycle;
  PodRegistry pods;
  Scraper scraper;
  TrainingFeedback feedback;
  ModelLabels model_labels;  // of every request metric, ours and GIE's
  RequestMetrics request_metrics{registry, model_labels};
  GieRequestMetrics gie_requests{registry, model_labels};
  CompletionFanout sinks;
  EppSchedulingPort port;
  FlowControlMetrics flow_control{
      registry, gie_pool_name(options),
      [this](const std::string& model) { return model_labels.label(model, false); }};
  AdmissionGate gate;
  std::unique_ptr<discovery::LeaderElector> elector;
  GieMetrics gie_metrics;
  EppMetrics epp_metrics;
  // Request bodies held at once, by the proxy and the gateway port together.
  std::shared_ptr<http::BodyBudget> body_budget =
      std::make_shared<http::BodyBudget>(options.proxy.body_budget);
  std::unique_ptr<ProxyServer> proxy;
  std::unique_ptr<extproc::ExtProcServer> ext_proc;
  http::Router admin;
  // The health port: gRPC health as upstream's EPP serves it (the charts' probes) and HTTP
  // /healthz, /readyz (ours), on a worker of its own so that load never delays a probe.
  http::IoWorkers health_workers{1, "epp-health"};
  extproc::HealthService grpc_health;
  std::unique_ptr<extproc::GrpcServer> health;
  std::atomic<bool> pool_synced{false};       // the pods are known (listed once, or from the file)
  std::unique_ptr<MetricsAuth> metrics_auth;  // --metrics-endpoint-auth; null = open
  http::HttpServer metrics_server;
  std::unique_ptr<discovery::PodDiscovery> pod_discovery;
  std::unique_ptr<discovery::ObjectiveDiscovery> objective_discovery;  // with an InferencePool
  // What objectives() combines; read and written on the timer thread only, after start().
  std::shared_ptr<const ObjectiveTable> file_objectives = file_cfg.objectives;
  std::vector<ClusterObjective> cluster_objectives;
  std::atomic<bool> draining{false};

  asio::io_context timer_io;
  std::list<Periodic> periodic;  // a list: each handler holds its task's address
  std::unique_ptr<ConfigReloader> reloader;
  std::thread proxy_thread, metrics_thread, timer_thread;
};

EppApp::Impl::Impl(const EppOptions& o)
    : options(o),
      pod_source(o.discover() ? PodSource::kKubernetes : PodSource::kConfig),
      file_cfg(load_epp_config(o.config_path, pod_source)),
      predictions(make_prediction_source(o, registry)),
      loaded([this] {
        register_builtin_plugins(plugins);
        if (!predictions) {
          spdlog::warn(
              "no PREDICTION_SERVER_URL and no IN_PROCESS_PREDICTIONS: scheduling with "
              "the composite fallback only");
        }
        LoadResult l = load(file_cfg);
        if (!l.ok()) {
          throw std::runtime_error("pipeline config: " + l.error);
        }
        return l;
      }()),
      decision_log(file_cfg.decision_log, {}, &registry),
      scheduling_cycle(loaded.pipeline, &sched_metrics, &decision_log),
      pods(o.upstream.staleness.value_or(file_cfg.startup.staleness)),
      scraper(ScraperOptions{.interval = o.upstream.scrape_interval.value_or(
                                 file_cfg.startup.scrape_interval),
                             .config = std::make_shared<const ScrapeConfig>(
                                 with_upstream_flags(loaded.settings.scrape, o.upstream))},
              pods),
      feedback(
          [&] {
            FeedbackOptions f = o.feedback;
            f.streaming_mode = [this] { return scheduling_cycle.pipeline()->streaming_mode; };
            return f;
          }(),
          &registry),
      port(scheduling_cycle, pods, predictions.get()),
      gate([this](const std::string& pool) { return port.pool_candidates(pool); }, &registry,
           &flow_control),
      elector(o.leader_elect
                  ? std::make_unique<discovery::LeaderElector>(
                        resolve_leader_election(o, file_cfg.startup),
                        discovery::KubeApiOptions{o.discovery.api_url, o.discovery.token_file,
                                                  o.discovery.ca_file})
                  : nullptr),
      gie_metrics(registry, GieMetricSources{pods, prefix_index, gate, gie_pool_name(o)},
                  BuildInfo::of_this_build()),
      epp_metrics(
          registry,
          EppMetricSources{
              pods, prefix_index, gate, port, [this] { return proxy->idle_upstream_connections(); },
              [this] { return !standby(); }, [this] { return proxy->active_requests(); },
              o.ext_proc_port > 0
                  ? std::function<int()>([this] { return ext_proc->active_streams(); })
                  : nullptr,
              [this] { return body_budget->held(); },
              [this] {
                gie_metrics.refresh();
                gie_requests.refresh();
              },
              o.ext_proc_port > 0 ? ext_proc_limit_events() : nullptr}),
      metrics_auth(o.upstream.metrics_endpoint_auth
                       ? std::make_unique<MetricsAuth>(discovery::KubeApiOptions{
                             o.discovery.api_url, o.discovery.token_file, o.discovery.ca_file})
                       : nullptr),
      metrics_server(admin_server(o.metrics_host, o.metrics_port, "epp-metrics"),
                     [this](http::Request& r) { return metrics_route(r); }) {
  if (const auto d = decision_log.config(); d.sample_rate > 0) {
    spdlog::info("decision log: sample rate {}, at most {} lines/s", d.sample_rate,
                 d.max_lines_per_second);
  }
  const ScrapeConfig scrape = with_upstream_flags(loaded.settings.scrape, o.upstream);
  if (o.upstream.scrape_interval || o.upstream.staleness) {
    spdlog::info(
        "--refresh-metrics-interval / --metrics-staleness-threshold given: they replace "
        "the config file's scrapeIntervalMs / stalenessMs");
  }
  spdlog::info("pod metrics: GET {}://<pod>{}, read as {} (a pod labelled {} names its engine)",
               scrape.scheme, scrape.path, scrape.default_engine, scrape.engine_label_key);
  pods.set_role_label(loaded.settings.endpoint_role_label);
  pods.set_pods(file_cfg.pods);
  pods.configure_outlier_detection(file_cfg.startup.outliers);
  model_labels.set_pool_serves(
      [this](const std::string& model) { return pods.serves_model(model); });
  sched_metrics.pod_namespace = pod_namespace(o);
  sinks.add(feedback);
  sinks.add(request_metrics);
  sinks.add(gie_requests);
  port.set_config(file_cfg.objectives, file_cfg.load_balancing, scheduling_cycle.pipeline());
  gate.configure(file_cfg.router_queue);
  sinks.add(port);

  ProxyOptions po = o.proxy;
  po.header_timeout = file_cfg.startup.header_timeout;
  po.idle_timeout = file_cfg.startup.idle_timeout;
  po.upstream_first_byte_timeout = file_cfg.startup.upstream_first_byte_timeout;
  po.default_prediction = file_cfg.startup.prediction_based_scheduling;
  po.forward_priority = file_cfg.startup.forward_priority;
  po.shared_body_budget = body_budget;
  po.not_serving = [this] { return standby(); };
  po.upstream_opened = &epp_metrics.upstream_opened();
  po.upstream_reused = &epp_metrics.upstream_reused();
  proxy = std::make_unique<ProxyServer>(po, port, pods, sinks, &gate, &workers);
  if (o.ext_proc_port > 0) {
    extproc::ExtProcServerOptions eo;
    eo.host = o.ext_proc_host;
    eo.port = o.ext_proc_port;
    eo.stream.body_limit = po.body_limit;
    eo.stream.default_prediction = po.default_prediction;
    eo.stream.forward_priority = po.forward_priority;
    eo.stream.not_serving = po.not_serving;
    eo.stream.allow_debug_header = po.allow_debug_header;
    eo.stream.endpoint_subset_filter = o.upstream.endpoint_subset_filter;
    eo.workers = &workers;
    eo.body_budget = body_budget;
    eo.max_message_bytes = o.upstream.grpc_max_receive_bytes;
    const StartupSettings& st = file_cfg.startup;
    eo.limits.idle_timeout = st.ext_proc_idle_timeout;
    eo.limits.stream_idle_timeout = st.ext_proc_stream_idle_timeout;
    eo.limits.max_connection_age = st.ext_proc_max_connection_age;
    eo.limits.max_connection_age_grace = st.ext_proc_max_connection_age_grace;
    eo.limits.max_header_list_bytes = st.ext_proc_max_header_list_bytes;
    eo.limits.keepalive_interval = st.ext_proc_keepalive_interval;
    eo.limits.keepalive_timeout = st.ext_proc_keepalive_timeout;
    eo.limits.connection_budget_share = st.ext_proc_connection_budget_share;
    eo.limits.stream_buffer_bytes = st.ext_proc_stream_buffer_bytes;
    eo.limits.connection_buffer_bytes = st.ext_proc_connection_buffer_bytes;
    eo.max_connections = st.ext_proc_max_connections;
    if (o.upstream.secure_serving) {
      eo.tls_context = extproc::tls_context_source(o.upstream.cert_path, o.upstream.tls_min_version,
                                                   o.upstream.cert_reload);
    }
    ext_proc = std::make_unique<extproc::ExtProcServer>(
        eo, extproc::ExtProcServices{&port, &pods, &sinks, &gate});
  }
  add_admin_routes();
  health = make_health_server();
  if (o.discover()) {
    discovery::DiscoveryOptions d = o.discovery;
    d.watch_timeout = file_cfg.startup.watch_timeout;
    pod_discovery = std::make_unique<discovery::PodDiscovery>(
        std::move(d), [this](const std::vector<PodConfig>& endpoints) {
          pods.set_pods(endpoints);
          pool_synced = true;
        });
    if (!o.discovery.pool_name.empty()) {
      watch_objectives();
    }
  } else {
    pool_synced = true;
  }
}

void EppApp::Impl::watch_objectives() {
  discovery::ObjectiveDiscoveryOptions oo;
  oo.api = {options.discovery.api_url, options.discovery.token_file, options.discovery.ca_file};
  oo.pool_namespace = options.discovery.pool_namespace.empty()
                          ? discovery::service_account_namespace(options.discovery.namespace_file)
                          : options.discovery.pool_namespace;
  oo.pool_name = options.discovery.pool_name;
  oo.pool_group = [this] { return pod_discovery->pool_group(); };
  oo.watch_timeout = file_cfg.startup.watch_timeout;
  // A new set is swapped in on the timer thread, where config reloads swap theirs.
  objective_discovery = std::make_unique<discovery::ObjectiveDiscovery>(
      std::move(oo), [this](const std::vector<ClusterObjective>& cluster) {
        asio::post(timer_io, [this, cluster] {
          cluster_objectives = cluster;
          port.set_objectives(objectives());
        });
      });
}

std::shared_ptr<const ObjectiveTable> EppApp::Impl::objectives() const {
  if (cluster_objectives.empty()) {
    return file_objectives;
  }
  return std::make_shared<ObjectiveTable>(file_objectives->with_cluster(cluster_objectives));
}

LoadResult EppApp::Impl::load(const EppFileConfig& c) {
  return c.pipeline_path.empty()
             ? load_pipeline(c.pipeline_text, plugins, handle, &sched_metrics, Document::kEppFile)
             : load_pipeline_file(c.pipeline_path, plugins, handle, &sched_metrics);
}

std::string EppApp::Impl::apply(const EppFileConfig& next) {
  // The components these configure were built with them at start.
  if (auto keys = changed_startup_keys(file_cfg.startup, next.startup); !keys.empty()) {
    return "changed " + keys + ", which is read at start: restart the EPP to change it";
  }
  LoadResult l = load(next);
  if (!l.ok()) {
    return l.error;
  }
  const ScrapeConfig scrape = with_upstream_flags(l.settings.scrape, options.upstream);
  if (auto why = scraper.needs_restart(scrape); !why.empty()) {
    return why;
  }
  scraper.set_config(std::make_shared<const ScrapeConfig>(scrape));
  pods.set_role_label(l.settings.endpoint_role_label);
  if (!options.discover()) {
    pods.set_pods(next.pods);  // with discovery the API server owns the pod set
  }
  file_objectives = next.objectives;
  port.set_config(objectives(), next.load_balancing, l.pipeline);
  gate.configure(next.router_queue);
  decision_log.configure(next.decision_log);
  return "";
}

std::optional<std::string> EppApp::Impl::standby() const {
  if (!elector || elector->leading()) {
    return std::nullopt;
  }
  const std::string leader = elector->leader();
  return "Not the leader: this EPP replica is a standby" +
         (leader.empty() ? std::string() : " (the leader is " + leader + ")");
}

std::optional<std::string> EppApp::Impl::not_ready(std::size_t& ready_pods) const {
  if (draining) {
    return "Draining: shutting down";
  }
  if (auto reason = standby()) {
    return reason;
  }
  ready_pods = pods.ready_count(std::chrono::steady_clock::now());
  if (ready_pods == 0) {
    return "No ready model server pods";
  }
  return std::nullopt;
}

void EppApp::Impl::add_admin_routes() {
  admin.add("GET", "/healthz", [](http::Request&) {
    return http::Response::json(200, nlohmann::json{{"status", "ok"}});
  });
  admin.add("GET", "/readyz", [this](http::Request&) {
    std::size_t ready = 0;
    if (auto reason = not_ready(ready)) {
      return http::Response::detail(503, *reason);
    }
    return http::Response::json(200, nlohmann::json{{"status", "ready"}, {"ready_pods", ready}});
  });
  admin.add("GET", "/metrics", [this](http::Request&) {
    return http::Response::text(200, epp_metrics.collect(), llmd::metrics::kContentType);
  });
}

std::function<std::vector<std::pair<std::string, uint64_t>>()>
EppApp::Impl::ext_proc_limit_events() {
  return [this]() -> std::vector<std::pair<std::string, uint64_t>> {
    const extproc::GrpcCounters* c = ext_proc ? ext_proc->counters() : nullptr;
    if (c == nullptr) {
      return {};
    }
    return {{"handshake_timeout", c->handshake_timeouts.load()},
            {"idle_timeout", c->idle_closes.load()},
            {"max_connection_age", c->age_closes.load()},
            {"keepalive_timeout", c->keepalive_timeouts.load()},
            {"stream_idle_timeout", c->stream_idle_resets.load()},
            {"max_header_list_bytes", c->header_list_resets.load()},
            {"message_budget", c->messages_over_budget.load()},
            {"stream_buffer_bytes", c->stream_input_pauses.load()},
            {"connection_buffer_bytes", c->connection_input_pauses.load()}};
  };
}

std::unique_ptr<extproc::GrpcServer> EppApp::Impl::make_health_server() {
  extproc::GrpcServerOptions ho;
  ho.host = options.health_host;
  ho.port = options.health_port;
  ho.take_descriptors = false;  // probes are answered while clients hold every descriptor
  ho.max_connections = 64;
  ho.max_message_bytes = 4096;  // a HealthCheckRequest is a service name
  ho.http1 = [this](const std::string& method, const std::string& path) {
    http::Request r;
    r.method = method;
    r.target = r.path = path;
    // Probes only: /metrics is the metrics port's (where --metrics-endpoint-auth guards it).
    http::Response answer = path == "/healthz" || path == "/readyz"
                                ? admin.route(r)
                                : http::Response::detail(404,
                                                         "the health port serves /healthz, "
                                                         "/readyz and gRPC health");
    return extproc::Http1Answer{answer.status, answer.content_type, std::move(answer.body)};
  };
  auto server = std::make_unique<extproc::GrpcServer>(ho, health_workers);
  grpc_health.add_to(*server);
  update_grpc_health();
  return server;
}

// Upstream's semantics (GIE cmd/epp/runner/health.go): without leader election every service
// name is SERVING once the pool is known; with it, liveness always is, and readiness, "" and
// the ext_proc service only on the leader; other names are SERVICE_UNKNOWN. A draining EPP is
// not ready either.
void EppApp::Impl::update_grpc_health() {
  using Unknown = extproc::HealthService::Unknown;
  const bool ready = pool_synced.load() && !draining.load() && !standby();
  if (!elector) {
    grpc_health.set_unknown(ready ? Unknown::kServing : Unknown::kNotServing);
    return;
  }
  grpc_health.set_unknown(Unknown::kServiceUnknown);
  grpc_health.set("liveness", true);
  for (const char* service : {"readiness", "", "envoy.service.ext_proc.v3.ExternalProcessor"}) {
    grpc_health.set(service, ready);
  }
}

http::Response EppApp::Impl::metrics_route(http::Request& r) {
  if (metrics_auth && r.path == "/metrics") {
    const auto verdict = metrics_auth->check(std::string(r.header("authorization")), r.path);
    if (verdict.status != 200) {
      return http::Response::detail(verdict.status, verdict.reason);
    }
  }
  return admin.route(r);
}

void EppApp::Impl::every(std::chrono::milliseconds period, std::function<void()> fn) {
  periodic.emplace_back(timer_io, period, std::move(fn)).arm();
}

void EppApp::Impl::start() {
  if (pod_discovery) {
    pod_discovery->start();
    if (objective_discovery) {
      objective_discovery->start();
    }
    spdlog::info("pods from Kubernetes: {}", options.discovery.pool_name.empty()
                                                 ? "selector " + options.pool_selector
                                                 : "InferencePool " + options.discovery.pool_name);
  }
  proxy->start();
  workers.start();
  if (ext_proc) {
    ext_proc->start();
    spdlog::info("gateway mode: ext_proc gRPC on {}:{}", options.ext_proc_host, ext_proc->port());
  }
  health->start();
  metrics_server.start();
  scraper.start();
  if (elector) {
    elector->start();
  }
  feedback.start();
  // These wait for the stop; the servers' workers (epp-health-0, epp-metrics-0) answer.
  metrics_thread = named_thread("epp-metrics-run", [this] { metrics_server.run(false); });

  reloader =
      std::make_unique<ConfigReloader>(options.config_path, pod_source, file_cfg,
                                       [this](const EppFileConfig& next) { return apply(next); });
  // Kubernetes updates a mounted ConfigMap within a minute; a second adds nothing to notice.
  every(std::chrono::seconds(1), [this] { reloader->check(); });
  // The router queue also drains on fresh scrapes and expires waiters by its timeout.
  every(std::chrono::milliseconds(5), [this] { gate.tick(); });
  // The health port's gRPC statuses follow the pool, the Lease and the drain.
  every(std::chrono::milliseconds(100), [this] { update_grpc_health(); });
  if (ext_proc) {
    // Keeps the gRPC readiness (gateway mode) in step with /readyz.
    every(std::chrono::milliseconds(100), [this, grpc_ready = std::optional<bool>()]() mutable {
      std::size_t ready_pods = 0;
      const bool ready = !not_ready(ready_pods);
      if (grpc_ready != ready) {
        grpc_ready = ready;
        ext_proc->set_ready(ready);
      }
    });
  }
  timer_thread = named_thread("epp-timers", [this] { timer_io.run(); });

  spdlog::info(
      "epp proxy on {}:{}, health {}:{}, metrics {}:{}; {} pods; predictions {}; "
      "feedback {}",
      options.proxy.host, proxy->port(), options.health_host, health->port(), options.metrics_host,
      metrics_server.port(), file_cfg.pods.size(),
      options.in_process_predictions ? "in process"
      : predictions                  ? options.prediction_server_url
                                     : "off",
      options.feedback.trainer_url.empty() ? "off" : options.feedback.trainer_url);
  spdlog::info("policies: {} objectives, {} model-level routing rules, router queue {}",
               file_cfg.objectives->size(),
               file_cfg.load_balancing ? file_cfg.load_balancing->rules.size() : 0,
               file_cfg.router_queue ? std::string(to_string(file_cfg.router_queue->queue.policy))
                                     : std::string("off"));
  // It waits for the drain; the workers serve.
  proxy_thread = named_thread("epp-proxy", [this] { proxy->run(); });
}

void EppApp::Impl::drain() {
  // Readiness drops first so the load balancer stops sending; requests in flight finish.
  draining = true;
  update_grpc_health();
  // A leader hands its Lease over now, so that a standby serves within its retry period while
  // the requests in flight here finish.
  std::thread hand_over([this] {
    if (elector) {
      elector->stop();
    }
  });
  std::thread ext_proc_drain([this] {
    if (ext_proc) {
      ext_proc->shutdown(options.drain_timeout);  // streams in flight finish, new ones refused
    }
  });
  proxy->drain(options.drain_timeout);
  ext_proc_drain.join();
  hand_over.join();
}

void EppApp::Impl::stop() {
  // The timers keep running through drain(): queued requests still need the gate's tick.
  proxy->stop();
  if (proxy_thread.joinable()) {
    proxy_thread.join();
  }
  health->shutdown(std::chrono::milliseconds(0));
  metrics_server.stop();
  if (metrics_thread.joinable()) {
    metrics_thread.join();
  }
  timer_io.stop();
  if (timer_thread.joinable()) {
    timer_thread.join();
  }
  if (objective_discovery) {
    objective_discovery->stop();
  }
  if (pod_discovery) {
    pod_discovery->stop();
  }
  scraper.stop();
  feedback.stop();
}

EppApp::EppApp(const EppOptions& options) : impl_(std::make_unique<Impl>(options)) {}

EppApp::~EppApp() {
  stop();
}

void EppApp::start() {
  impl_->start();
}

void EppApp::drain() {
  impl_->drain();
}

void EppApp::stop() {
  impl_->stop();
}

}  // namespace llmd::epp
