#include "epp/extproc/ext_proc_server.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <utility>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>

#include <absl/synchronization/mutex.h>
#include <fmt/format.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <spdlog/spdlog.h>

#include "common/http/io_workers.h"
#include "epp/extproc/external_processor.grpc.pb.h"

namespace llmd::epp::extproc {
namespace {

namespace net = boost::asio;

// The streams' threads and the only way onto them: the EPP's I/O workers when it has them
// (each stream is placed on one for its life, as a proxy connection is), else a pool of its own.
// A prediction or a router queue wake-up can come back after the server is gone (the predictor
// client outlives it): a post then finds the executors closed and drops the continuation, whose
// stream ends as a client that went away. Thread-safe.
class StreamExecutors {
 public:
  StreamExecutors(int threads, http::IoWorkers* workers) : workers_(workers) {
    if (workers_ == nullptr) {
      pool_.emplace(static_cast<std::size_t>(std::max(1, threads)));
    }
  }
  // The worker a new stream lives on (round robin), or 0 with a pool.
  std::size_t place() {
    return workers_ == nullptr ? 0
                               : next_.fetch_add(1, std::memory_order_relaxed) % workers_->size();
  }
  bool on_workers() const { return workers_ != nullptr; }
  // Runs what was posted before, then drops later posts. With a pool its threads stop; the
  // workers are the EPP's and keep running, so this waits for the drains queued on them (they
  // call the services the server was given, which the owner destroys after it).
  void close() {
    std::unique_lock lock(mu_);
    open_ = false;
    if (pool_) {
      lock.unlock();
      pool_->join();
      return;
    }
    drained_.wait(lock, [this] { return queued_ == 0; });
  }

 private:
  friend class StreamStrand;
  // mu_ held, open_.
  void post_locked(std::size_t worker, std::function<void()> fn) {
    if (pool_) {
      net::post(*pool_, std::move(fn));
      return;
    }
    ++queued_;
    net::post(workers_->at(worker), [this, fn = std::move(fn)] {
      fn();
      std::lock_guard lock(mu_);
      if (--queued_ == 0) {
        drained_.notify_all();
      }
    });
  }

  http::IoWorkers* const workers_;
  std::atomic<std::size_t> next_{0};
  std::mutex mu_;
  std::condition_variable drained_;
  bool open_ = true;        // guarded by mu_
  std::size_t queued_ = 0;  // guarded by mu_: drains posted to a worker, not yet run
  std::optional<net::thread_pool> pool_;
};

// One stream's strand: its functions run one at a time, in the order they were handed in.
// A message from gRPC finds the strand idle most of the time and then runs at once on gRPC's
// thread (claim + run_here): a hop to the pool and back costs context switches, which at
// 1,500 req/s were ~9 % of the EPP's CPU. Work from elsewhere (a prediction, a router queue
// wake-up) is posted to the stream's worker (or the pool). On a worker, the message that starts
// scheduling is posted too: its prediction call then goes out from the worker and answers
// there (the predictor client's per-worker pools), so the answer continues the stream on the
// same thread instead of waking the client's I/O thread and then another. Holds its
// StreamExecutors, which is destroyed (and with it the pool) only after the strand. Thread-safe.
class StreamStrand : public std::enable_shared_from_this<StreamStrand> {
 public:
  explicit StreamStrand(std::shared_ptr<StreamExecutors> executors)
      : executors_(std::move(executors)), worker_(executors_->place()) {}
  void post(std::function<void()> fn) {
    if (claim(std::move(fn))) {
      std::lock_guard lock(executors_->mu_);
      if (executors_->open_) {
        executors_->post_locked(worker_, [self = shared_from_this()] { self->drain(); });
      }
    }
  }
  bool on_worker() const { return executors_->on_workers(); }
  // Queues `fn`; true when the strand was idle and the caller must now drain it: gRPC's
  // reactor calls run_here() (after starting the next read: the order of messages is the
  // queue's), post() hands the drain to the pool.
  bool claim(std::function<void()> fn) {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(fn));
    if (busy_) {
      return false;
    }
    busy_ = true;
    return true;
  }
  // Runs the queue on the calling thread until it is empty.
  void run_here() {
    {
      std::lock_guard lock(executors_->mu_);
      if (!executors_->open_) {
        return;
      }
    }
    drain();
  }

 private:
  void drain() {
    while (true) {
      std::function<void()> fn;
      {
        std::lock_guard lock(mu_);
        if (queue_.empty()) {
          busy_ = false;
          return;
        }
        fn = std::move(queue_.front());
        queue_.pop_front();
      }
      fn();
    }
  }

  std::shared_ptr<StreamExecutors> executors_;
  const std::size_t worker_;
  std::mutex mu_;
  std::deque<std::function<void()>> queue_;  // guarded by mu_
  bool busy_ = false;  // guarded by mu_: a thread is draining (or about to)
};

constexpr char kServiceName[] = "envoy.service.ext_proc.v3.ExternalProcessor";

// What the stream's strand shares with the reactor (gRPC's threads): the reactor's own state
// and the way out (null once the reactor is gone).
struct StreamLock {
  std::mutex mu;
  class ProcessReactor* reactor = nullptr;  // guarded by mu
};

class ProcessReactor final
    : public grpc::ServerBidiReactor<pb::ProcessingRequest, pb::ProcessingResponse> {
 public:
  // The stream lives on `strand`: every call into it is posted there, in arrival order.
  ProcessReactor(const ExtProcOptions& options, const ExtProcServices& services,
                 std::atomic<int>& active, std::shared_ptr<StreamStrand> strand)
      : active_(active), lock_(std::make_shared<StreamLock>()), strand_(std::move(strand)) {
    ++active_;
    lock_->reactor = this;
    std::weak_ptr<StreamLock> weak = lock_;
    stream_ = std::make_shared<ExtProcStream>(
        options, services,
        // Called on the strand.
        [weak](pb::ProcessingResponse r) {
          if (auto l = weak.lock()) {
            std::lock_guard guard(l->mu);
            if (l->reactor != nullptr) {
              l->reactor->enqueue(std::move(r));
            }
          }
        },
        [strand = strand_](std::function<void()> fn) { strand->post(std::move(fn)); });
    StartRead(&incoming_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // The gateway half-closed (the exchange is over) or the stream broke. Finishing waits
      // for the messages already posted to the strand, whose answers go out first.
      end_reads(grpc::Status::OK);
      return;
    }
    if (incoming_.request_case() == pb::ProcessingRequest::REQUEST_NOT_SET) {
      // Nothing this EPP can answer (bytes that decoded to no known request, e.g. another
      // protocol or version): an error status, so the gateway applies its failure mode
      // instead of waiting for a response that never comes.
      end_reads(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                             "ProcessingRequest carries no request_headers, request_body, "
                             "response_headers, response_body or trailers"));
      return;
    }
    // Swapped out, not copied: a buffered request body travels in one message.
    auto message = std::make_shared<pb::ProcessingRequest>();
    message->Swap(&incoming_);
    // Queued before the next read can complete (order), run after it started (overlap). The
    // strand is held by a local: once the read is started the reactor may finish and go.
    std::shared_ptr<StreamStrand> strand = strand_;
    auto run = [stream = stream_, message] { stream->on_message(*message); };
    if (strand->on_worker() && starts_scheduling(*message)) {
      strand->post(std::move(run));
      StartRead(&incoming_);
      return;
    }
    const bool run_here = strand->claim(std::move(run));
    StartRead(&incoming_);
    if (run_here) {
      strand->run_here();
    }
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard guard(lock_->mu);
    writing_ = false;
    if (!ok) {
      outgoing_.clear();
      strand_->post([stream = stream_] { stream->cancel(); });
      reads_done_ = true;
    } else {
      outgoing_.pop_front();
    }
    write_next();
    maybe_finish();
  }

  void OnCancel() override {
    strand_->post([stream = stream_] { stream->cancel(); });
  }

  void OnDone() override {
    {
      std::lock_guard guard(lock_->mu);
      lock_->reactor = nullptr;
    }
    strand_->post([stream = std::move(stream_)] { stream->cancel(); });
    --active_;
    delete this;
  }

  // lock_->mu held.
  void enqueue(pb::ProcessingResponse r) {
    if (finished_) {
      return;
    }
    outgoing_.push_back(std::move(r));
    write_next();
  }

 private:
  void write_next() {
    if (!writing_ && !outgoing_.empty() && !finished_) {
      writing_ = true;
      StartWrite(&outgoing_.front());
    }
  }
  // On the strand, after the messages read before: cancel the stream, then finish the RPC once
  // the answers queued so far are written.
  void end_reads(grpc::Status status) {
    strand_->post([stream = stream_, lock = lock_, status = std::move(status)] {
      stream->cancel();
      std::lock_guard guard(lock->mu);
      if (lock->reactor != nullptr) {
        lock->reactor->reads_done_ = true;
        lock->reactor->error_ = status;
        lock->reactor->maybe_finish();
      }
    });
  }
  void maybe_finish() {
    if (reads_done_ && !writing_ && outgoing_.empty() && !finished_) {
      finished_ = true;
      Finish(error_);
    }
  }

  // The message whose handling asks for predictions: the request's last body chunk, or headers
  // with no body to follow. Later phases (the response) only map and relay.
  static bool starts_scheduling(const pb::ProcessingRequest& m) {
    return (m.has_request_body() && m.request_body().end_of_stream()) ||
           (m.has_request_headers() && m.request_headers().end_of_stream());
  }

  std::atomic<int>& active_;
  std::shared_ptr<StreamLock> lock_;
  std::shared_ptr<StreamStrand> strand_;
  std::shared_ptr<ExtProcStream> stream_;  // used on strand_ only
  pb::ProcessingRequest incoming_;         // gRPC's read buffer (reads are sequential)
  std::deque<pb::ProcessingResponse> outgoing_;  // guarded by lock_->mu; front() is on the wire
  bool writing_ = false;                         // guarded by lock_->mu
  bool reads_done_ = false;                      // guarded by lock_->mu
  bool finished_ = false;                        // guarded by lock_->mu
  grpc::Status error_ = grpc::Status::OK;        // guarded by lock_->mu; the stream's status
};

class Service final : public pb::ExternalProcessor::CallbackService {
 public:
  Service(const ExtProcOptions& options, const ExtProcServices& services,
          std::atomic<int>& active, std::shared_ptr<StreamExecutors> executors)
      : options_(options), services_(services), active_(active),
        executors_(std::move(executors)) {}

  grpc::ServerBidiReactor<pb::ProcessingRequest, pb::ProcessingResponse>* Process(
      grpc::CallbackServerContext*) override {
    return new ProcessReactor(options_, services_, active_,
                              std::make_shared<StreamStrand>(executors_));
  }

 private:
  ExtProcOptions options_;
  ExtProcServices services_;
  std::atomic<int>& active_;
  std::shared_ptr<StreamExecutors> executors_;
};

}  // namespace

struct ExtProcServer::Impl {
  Impl(ExtProcServerOptions o, ExtProcServices s)
      : options(std::move(o)),
        executors(std::make_shared<StreamExecutors>(options.threads, options.workers)),
        service(options.stream, s, active, executors) {}
  // The server has stopped (~ExtProcServer): what the streams posted runs, then the threads
  // end, while the services the streams call are still alive.
  ~Impl() { executors->close(); }
  ExtProcServerOptions options;
  std::atomic<int> active{0};
  std::shared_ptr<StreamExecutors> executors;
  Service service;
  std::mutex mu;  // guards `server` (readiness and shutdown come from different threads)
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};

ExtProcServer::ExtProcServer(ExtProcServerOptions options, ExtProcServices services)
    : impl_(std::make_unique<Impl>(std::move(options), services)) {}

ExtProcServer::~ExtProcServer() { shutdown(std::chrono::milliseconds(0)); }

void ExtProcServer::start() {
  // Debian's Abseil is built without NDEBUG, so every absl::Mutex gRPC takes records a stack
  // trace and updates a lock-order graph (deadlock detection): ~2 % of the EPP's CPU in
  // gateway mode (perf, 1,000 req/s). A debugging aid, not wanted in production.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  const std::string address = fmt::format("{}:{}", impl_->options.host, impl_->options.port);
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &impl_->port);
  builder.RegisterService(&impl_->service);
  // A request body travels in one message in BUFFERED mode: allow the EPP's body limit.
  builder.SetMaxReceiveMessageSize(
      static_cast<int>(std::min<std::size_t>(impl_->options.stream.body_limit + 65536,
                                             std::numeric_limits<int>::max())));
  auto server = builder.BuildAndStart();
  if (!server || impl_->port == 0) {
    throw std::runtime_error("cannot serve ext_proc on " + address);
  }
  server->GetHealthCheckService()->SetServingStatus("liveness", true);
  {
    std::lock_guard lock(impl_->mu);
    impl_->server = std::move(server);
  }
  set_ready(false);
}

uint16_t ExtProcServer::port() const { return static_cast<uint16_t>(impl_->port); }

void ExtProcServer::set_ready(bool ready) {
  std::lock_guard lock(impl_->mu);
  if (!impl_->server) {
    return;
  }
  auto* health = impl_->server->GetHealthCheckService();
  health->SetServingStatus("readiness", ready);
  health->SetServingStatus(kServiceName, ready);
  health->SetServingStatus("", ready);
}

void ExtProcServer::shutdown(std::chrono::milliseconds timeout) {
  set_ready(false);
  std::unique_ptr<grpc::Server> server;
  {
    std::lock_guard lock(impl_->mu);
    server = std::move(impl_->server);
  }
  if (!server) {
    return;
  }
  server->Shutdown(std::chrono::system_clock::now() + timeout);
  server->Wait();
}

int ExtProcServer::active_streams() const { return impl_->active.load(); }

}  // namespace llmd::epp::extproc
