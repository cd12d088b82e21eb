#pragma once
// IoWorkers: a server's event loops in Envoy's worker model. Each worker is one io_context run by
// exactly one thread. A connection is placed on one worker for its life, and what its requests
// start there (the request's coroutine, the exchange with the pod, the call to a predictor) runs
// on the same thread: handing work from one step to the next is a queue push, not a wake-up of
// another thread (with several threads on one io_context, every post woke an idle one: a quarter
// of the EPP's CPU went to context switches).
//
// A worker's executor is its own strand: handlers on it never run concurrently.
//
// Threads: size(), at(), current() and current_context() are thread-safe; start() and stop() are
// called by the owner (stop() also from the destructor). Work posted from any thread runs on the
// worker's thread. Objects that hold sockets of a worker (client pools, servers) must be destroyed
// before the IoWorkers; handlers still queued when stop() returns are destroyed without running
// when the IoWorkers is.
#include <cstddef>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace boost::asio {
class io_context;
}

namespace llmd::http {

class IoWorkers {
 public:
  // `count` workers (at least 1); their threads are named "<name>-<i>" (top -H, perf).
  IoWorkers(int count, std::string name);
  ~IoWorkers();
  IoWorkers(const IoWorkers&) = delete;
  IoWorkers& operator=(const IoWorkers&) = delete;

  std::size_t size() const { return loops_.size(); }
  boost::asio::io_context& at(std::size_t worker) const;

  // Starts one thread per worker; each runs its loop (kept alive while idle) until stop().
  // Idempotent.
  void start();
  // Stops the loops and joins the threads. Idempotent; not from a worker thread.
  void stop();
  bool running() const { return !threads_.empty(); }

  // The worker whose thread calls: its index in *this, or npos when the caller is not one of
  // this object's threads.
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);
  std::size_t current() const;
  // The calling worker thread's loop (of any IoWorkers), nullptr on any other thread: clients
  // keep a connection pool per worker on it (as Envoy's per-worker connection pools).
  static boost::asio::io_context* current_context();

 private:
  struct Loop;
  const std::string name_;
  std::vector<std::unique_ptr<Loop>> loops_;
  std::vector<std::thread> threads_;
};

}  // namespace llmd::http
