#include "bench/modelsim/modelsim_app.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "bench/modelsim/fault.h"
#include "bench/modelsim/pod.h"

namespace llmd::modelsim {

namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;
constexpr double kInf = std::numeric_limits<double>::infinity();

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

struct ModelSim::Impl {
  // One pod and the strand that owns it. Everything in `pod` and `armed_at` is touched only
  // on `strand`.
  struct Host {
    std::unique_ptr<Pod> pod;
    http::StrandPtr strand;
    double armed_at = kInf;
    std::size_t listener = 0;
  };

  // The server core answers its own errors (413, 431, 400) as OpenAI error objects, and a stopping
  // simulator drops its connections at once.
  static http::StreamServerOptions server_options(http::StreamServerOptions o) {
    o.server_name = "modelsim";
    o.drain_timeout = std::chrono::milliseconds(0);
    if (!o.error_response) {
      o.error_response = [](int status, const std::string& message) {
        return error_response(status, message);
      };
    }
    return o;
  }

  explicit Impl(ModelSimConfig c)
      : config(std::move(c)),
        t0(Clock::now()),
        server(server_options(config.server), [this](std::size_t listener, http::Request&& request,
                                                     http::ResponseStreamPtr stream) {
          handle(listener, std::move(request), std::move(stream));
        }) {
    if (config.pods < 1 || config.pods > 1024) {
      throw std::invalid_argument("--pods must be in [1, 1024]");
    }
    if (config.slow_pods < 0 || config.slow_pods > config.pods) {
      throw std::invalid_argument("--slow-pods must be in [0, pods]");
    }
    if (!(config.time_scale > 0) || !std::isfinite(config.time_scale)) {
      throw std::invalid_argument("--time-scale must be > 0");
    }
    hosts.resize(static_cast<std::size_t>(config.pods));
    for (int i = 0; i < config.pods; ++i) {
      PodConfig pc;
      pc.index = i;
      pc.engine = config.engine;
      if (i >= config.pods - config.slow_pods) {
        const auto jitter = pc.engine.profile.jitter_sigma;
        const auto blocks = pc.engine.profile.num_gpu_blocks;
        const bool custom_blocks = blocks != sim::h100_profile().num_gpu_blocks;
        pc.engine.profile = config.slow_profile;
        pc.engine.profile.jitter_sigma = jitter;
        if (custom_blocks) {
          pc.engine.profile.num_gpu_blocks = blocks;
        }
      }
      pc.engine.seed = config.engine.seed + static_cast<uint64_t>(i);
      pc.protocol = config.protocol;
      pc.time_scale = config.time_scale;
      auto& h = hosts[static_cast<std::size_t>(i)];
      h.pod = std::make_unique<Pod>(pc, now_ms());
      h.strand = server.make_strand();
      const uint16_t port = config.base_port == 0 ? 0 : static_cast<uint16_t>(config.base_port + i);
      h.listener = server.listen(port);
    }
  }

  double now_ms() const {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  }

  // Runs `fn(now)` on the pod's strand, after a stall if the pod is stalled, then re-arms.
  template <typename Fn>
  void with_pod(Host& h, Fn fn, bool hold_when_stalled = true) {
    h.strand->post([this, &h, fn = std::move(fn), hold_when_stalled]() mutable {
      const double now = now_ms();
      if (hold_when_stalled && h.pod->fault_mode(now) == FaultMode::kStall) {
        h.pod->hold([this, fn]() mutable { fn(now_ms()); });
      } else {
        fn(now);
      }
      reschedule(h);
    });
  }

  void reschedule(Host& h) {
    const double next = h.pod->next_wakeup();
    if (next == h.armed_at) {
      return;
    }
    h.armed_at = next;
    if (next == kInf) {
      h.strand->disarm();
      return;
    }
    const auto when = t0 + std::chrono::duration_cast<Clock::duration>(
                               std::chrono::duration<double, std::milli>(std::max(0.0, next)));
    h.strand->arm(when, [this, &h] {
      h.armed_at = kInf;
      h.pod->advance(now_ms());
      reschedule(h);
    });
  }

  std::string request_id(const http::Request& r, std::size_t pod) {
    const auto given = r.header("x-request-id");
    if (!given.empty() && given.size() <= 128) {
      return std::string(given);
    }
    return "modelsim-" + std::to_string(pod) + "-" + std::to_string(next_request.fetch_add(1));
  }

  void start_inference(Host& h, InferenceRequest r, const std::string& id,
                       const http::ResponseStreamPtr& stream, double now) {
    const uint64_t key = h.pod->handle_inference(std::move(r), id, stream, unix_seconds(), now);
    if (key != 0) {
      stream->on_disconnect([this, &h, key] {
        with_pod(
            h, [&h, key](double t) { h.pod->client_gone(key, t); }, false);
      });
    }
  }

  void handle(std::size_t listener, http::Request&& req, http::ResponseStreamPtr stream) {
    Host& h = hosts.at(listener);
    const std::string& path = req.path;
    const bool get = req.method == "GET" || req.method == "HEAD";
    const bool post = req.method == "POST";

    if (!config.api_key.empty() && path.starts_with("/v1/") &&
        http::require_bearer(config.api_key, req)) {
      return stream->respond(error_response(
          ProtocolError{401, "Unauthorized", "invalid_request_error", "", "invalid_api_key"}));
    }
    if (path == "/v1/completions" || path == "/v1/chat/completions") {
      if (!post) {
        return stream->respond(error_response(405, "Method Not Allowed"));
      }
      auto parsed =
          parse_inference_request(path == "/v1/chat/completions", req.body, config.protocol);
      if (auto* err = std::get_if<ProtocolError>(&parsed)) {
        return stream->respond(error_response(*err));
      }
      auto id = request_id(req, listener);
      auto submit = [this, &h, r = std::get<InferenceRequest>(std::move(parsed)), id,
                     stream](double now) mutable {
        if (const double delay = h.pod->slow_delay_ms(now); delay > 0) {
          // Slow fault: the request reaches the engine later (checked once, not re-delayed).
          h.strand->post_after(std::chrono::milliseconds(static_cast<int64_t>(delay)),
                               [this, &h, r = std::move(r), id, stream]() mutable {
                                 with_pod(
                                     h, [this, &h, r = std::move(r), id, stream](double t) mutable {
                                       start_inference(h, std::move(r), id, stream, t);
                                     });
                               });
          return;
        }
        start_inference(h, std::move(r), id, stream, now);
      };
      with_pod(h, std::move(submit));
      return;
    }
    if (path == "/admin/fault") {
      if (post) {
        auto parsed = parse_fault(req.body);
        if (auto* err = std::get_if<std::string>(&parsed)) {
          return stream->respond(http::Response::detail(400, *err));
        }
        const FaultSpec f = std::get<FaultSpec>(parsed);
        spdlog::info("modelsim: pod {} fault {} for {} ms", listener, fault_mode_name(f.mode),
                     f.duration_ms);
        with_pod(
            h, [&h, f, stream](double now) { stream->respond(h.pod->set_fault(f, now)); }, false);
        return;
      }
      if (get) {
        with_pod(
            h,
            [&h, stream](double now) {
              stream->respond(http::Response::json(
                  200, Json{{"pod", h.pod->config().index},
                            {"mode", fault_mode_name(h.pod->fault_mode(now))}}));
            },
            false);
        return;
      }
      return stream->respond(http::Response::detail(405, "Method Not Allowed"));
    }
    if (!get) {
      return stream->respond(http::Response::detail(405, "Method Not Allowed"));
    }
    if (path == "/health") {
      with_pod(h, [&h, stream](double now) { stream->respond(h.pod->health(now)); });
    } else if (path == "/metrics") {
      with_pod(h, [&h, stream](double now) { stream->respond(h.pod->metrics(now)); });
    } else if (path == "/admin/state") {
      with_pod(
          h, [&h, stream](double now) { stream->respond(h.pod->state(now)); }, false);
    } else if (path == "/v1/models") {
      const auto& model = config.protocol.model_name;
      auto body = Json{{"object", "list"},
                       {"data", Json::array({Json{{"id", model},
                                                  {"object", "model"},
                                                  {"created", unix_seconds()},
                                                  {"owned_by", "vllm"},
                                                  {"root", model},
                                                  {"parent", nullptr},
                                                  {"max_model_len", config.engine.max_model_len},
                                                  {"permission", Json::array()}}})}};
      with_pod(h, [stream, body](double) { stream->respond(http::Response::json(200, body)); });
    } else if (path == "/version") {
      with_pod(h, [stream](double) {
        stream->respond(http::Response::json(200, Json{{"version", "modelsim"}}));
      });
    } else if (path.starts_with("/v1/")) {
      stream->respond(error_response(404, "Not Found: " + req.method + " " + path));
    } else {
      stream->respond(http::Response::detail(404, "Not Found"));
    }
  }

  const ModelSimConfig config;
  const Clock::time_point t0;
  std::atomic<uint64_t> next_request{1};
  http::StreamServer server;  // owns the io_context: declared before the hosts that use it
  std::vector<Host> hosts;    // destroyed first (their timers need the io_context)
};

ModelSim::ModelSim(ModelSimConfig config) : impl_(std::make_unique<Impl>(std::move(config))) {}

ModelSim::~ModelSim() = default;

uint16_t ModelSim::port(int pod) const {
  return impl_->server.port(impl_->hosts.at(static_cast<std::size_t>(pod)).listener);
}

int ModelSim::pods() const {
  return static_cast<int>(impl_->hosts.size());
}

void ModelSim::run(bool handle_signals) {
  impl_->server.run(handle_signals);
}

void ModelSim::stop() {
  impl_->server.stop();
}

}  // namespace llmd::modelsim
