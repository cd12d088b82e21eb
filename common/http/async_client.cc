#include "common/http/async_client.h"

#include <condition_variable>
#include <list>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <spdlog/spdlog.h>

#include "common/http/client_core.h"
#include "common/http/io_workers.h"
#include "common/util/thread_name.h"

namespace llmd::http {

namespace asio = boost::asio;

struct AsyncHttpClient::Impl {
  Impl(std::vector<Url> urls, Options options)
      : work(asio::make_work_guard(ioc)),
        core(ioc.get_executor(), core_options(options)),
        targets(std::move(urls)),
        options(options) {}

  static ClientCore::Options core_options(const Options& o) {
    ClientCore::Options c;
    c.max_idle_per_origin = o.max_idle_per_target;
    c.response_body_limit = o.response_body_limit;
    c.tls = o.tls;
    return c;
  }

  void start(const Url& url, std::string_view method, std::string_view path, std::string body,
             std::chrono::milliseconds timeout, Callback done) {
    ClientRequest req;
    req.method = std::string(method);
    req.target = url.base_path;
    req.target.append(path);
    if (!body.empty() || method == "POST" || method == "PUT") {
      req.content_type = "application/json";
    }
    req.body = std::move(body);
    ClientTimeouts timeouts;
    timeouts.total = timeout;
    ClientCore* worker = options.on_caller_worker ? worker_core() : nullptr;
    if (worker == nullptr) {
      core.fetch(url, std::move(req), timeouts, [done = std::move(done)](ClientResponse r) {
        done(AsyncResponse{r.status, std::move(r.body), std::move(r.error), r.timed_out});
      });
      return;
    }
    {
      std::lock_guard lock(worker_mu);
      ++on_workers;
    }
    worker->fetch(url, std::move(req), timeouts, [this, done = std::move(done)](ClientResponse r) {
      done(AsyncResponse{r.status, std::move(r.body), std::move(r.error), r.timed_out});
      std::lock_guard lock(worker_mu);
      if (--on_workers == 0) {
        worker_cv.notify_all();
      }
    });
  }

  // The calling worker's pool (made on its first exchange there), or nullptr when the caller
  // is not an I/O worker's thread.
  ClientCore* worker_core() {
    asio::io_context* worker = IoWorkers::current_context();
    if (worker == nullptr) {
      return nullptr;
    }
    std::lock_guard lock(worker_mu);
    auto& c = worker_cores[worker];
    if (!c) {
      c = std::make_unique<ClientCore>(worker->get_executor(), core_options(options));
    }
    return c.get();
  }

  // I/O thread: arms a timer for `task`, kept in `timers` until it fires or is cancelled.
  void arm(std::chrono::steady_clock::time_point at, std::function<void()> task) {
    if (stopped) {
      return;
    }
    auto it = timers.emplace(timers.end(), ioc);
    it->expires_at(at);
    it->async_wait([this, it, task = std::move(task)](const boost::system::error_code& ec) {
      timers.erase(it);  // the handler was moved out of the timer: erasing it here is safe
      if (!ec && !stopped) {
        task();
      }
    });
  }

  // I/O thread: no task runs from now on, the timers pending are cancelled (their handlers
  // then run with operation_aborted and drop their tasks), the exchanges in flight end.
  void shutdown() {
    stopped = true;
    for (auto& t : timers) {
      t.cancel();
    }
    core.shutdown();
  }

  // The I/O thread: a callback that throws is logged, not allowed to end the process.
  void run() {
    while (true) {
      try {
        ioc.run();
        return;
      } catch (const std::exception& e) {
        spdlog::error("http client: a callback threw: {}", e.what());
      }
    }
  }

  asio::io_context ioc{1};
  asio::executor_work_guard<asio::io_context::executor_type> work;
  ClientCore core;  // after ioc: its connections go before the context
  const std::vector<Url> targets;
  const Options options;
  // A pool per caller's worker, and the exchanges running there, which the destructor waits
  // for before it drops the pools.
  std::mutex worker_mu;
  std::condition_variable worker_cv;
  std::unordered_map<asio::io_context*, std::unique_ptr<ClientCore>> worker_cores;
  std::size_t on_workers = 0;  // guarded by worker_mu
  // Timers of post_at() not yet fired; the I/O thread's only. A list: each handler holds its
  // timer's iterator.
  std::list<asio::steady_timer> timers;
  bool stopped = false;  // the I/O thread's only
  std::thread thread;
};

AsyncHttpClient::AsyncHttpClient(std::vector<Url> targets, Options options)
    : impl_(std::make_unique<Impl>(std::move(targets), options)) {
  impl_->thread = named_thread(options.thread_name, [impl = impl_.get()] { impl->run(); });
}

AsyncHttpClient::~AsyncHttpClient() {
  // On the I/O thread, where every exchange runs: none can start between the snapshot of those
  // in flight and their cancellation. Their callbacks run before the thread ends.
  asio::post(impl_->ioc, [impl = impl_.get()] { impl->shutdown(); });
  impl_->work.reset();
  impl_->thread.join();  // returns once every exchange has called back
  std::unique_lock lock(impl_->worker_mu);
  impl_->worker_cv.wait(lock, [this] { return impl_->on_workers == 0; });
}

void AsyncHttpClient::request(std::size_t target, std::string_view method, std::string_view path,
                              std::string body, std::chrono::milliseconds timeout, Callback done) {
  if (target >= impl_->targets.size()) {
    asio::post(impl_->ioc, [cb = std::move(done)] {
      cb(AsyncResponse{0, {}, "unknown target", false});
    });
    return;
  }
  impl_->start(impl_->targets[target], method, path, std::move(body), timeout, std::move(done));
}

void AsyncHttpClient::request(const Url& url, std::string_view method, std::string_view path,
                              std::string body, std::chrono::milliseconds timeout, Callback done) {
  impl_->start(url, method, path, std::move(body), timeout, std::move(done));
}

void AsyncHttpClient::post(std::function<void()> task) {
  asio::post(impl_->ioc, [impl = impl_.get(), task = std::move(task)] {
    if (!impl->stopped) {
      task();
    }
  });
}

void AsyncHttpClient::post_at(std::chrono::steady_clock::time_point at,
                              std::function<void()> task) {
  // Inline when called on the I/O thread (a task re-arming itself), else posted there: the
  // timer list is the I/O thread's.
  asio::dispatch(impl_->ioc, [impl = impl_.get(), at, task = std::move(task)]() mutable {
    impl->arm(at, std::move(task));
  });
}

std::uint64_t AsyncHttpClient::connections_opened(std::size_t target) const {
  return target < impl_->targets.size() ? impl_->core.connections_opened(impl_->targets[target])
                                        : 0;
}

}  // namespace llmd::http
