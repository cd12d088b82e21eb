#pragma once
// Listener: the accept loop every server of the process shares (the HTTP/1 StreamServer and
// the EPP's gRPC server): bind, accept with back-off, the process's descriptor budget, the
// connection cap, and the worker a connection lives on. What a connection then speaks is the
// server's (its OnAccept). Asio appears here because the accepted socket is handed over; only
// the servers' .cc files include this header.
//
// Bounds: before each accept a connection's descriptors are taken from
// DescriptorBudget::process() and its place under the cap is reserved; at either limit the
// listener stops accepting (connections wait in the kernel's backlog) and tries again after a
// pause of 10 ms doubling to 1 s, as after a failed accept (EMFILE). Both are held by the
// connection's ConnectionSlot and given back when it is destroyed.
// Placement: a connection goes to the worker with the fewest open connections of the
// ConnectionCounts it counts in (one per server, shared by its listeners), so kept-alive
// client pools spread over the cores (Envoy's exact balance).
// Threads: the accept loop and OnAccept run on worker 0; the constructor, port(), start() and
// close() are the owner's; ConnectionCounts and ConnectionSlot are thread-safe.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/ip/tcp.hpp>

#include "common/http/budget.h"

namespace llmd::http {

class IoWorkers;

// Open connections of one server: in all (under its cap) and per worker.
class ConnectionCounts {
 public:
  // `max_connections` 0: no cap.
  ConnectionCounts(std::size_t workers, std::size_t max_connections);
  // Places held under the cap: the open connections and the accept waiting for the next.
  std::size_t held() const { return cap_.held(); }
  std::size_t open_on(std::size_t worker) const { return per_worker_.at(worker).load(); }
  // The worker with the fewest open connections (the lowest index among equals).
  std::size_t least_loaded() const;

 private:
  friend class Listener;
  friend class ConnectionSlot;
  Budget cap_;
  std::vector<std::atomic<std::size_t>> per_worker_;
};

// What one accepted connection holds: its descriptors, its place under the cap and on its
// worker. Move-only; gives them back when destroyed.
class ConnectionSlot {
 public:
  ConnectionSlot() = default;
  ConnectionSlot(std::shared_ptr<ConnectionCounts> counts, std::size_t worker,
                 std::size_t descriptors);
  ConnectionSlot(ConnectionSlot&& other) noexcept;
  ConnectionSlot& operator=(ConnectionSlot&& other) noexcept;
  ~ConnectionSlot();
  std::size_t worker() const { return worker_; }

 private:
  void release();
  std::shared_ptr<ConnectionCounts> counts_;  // null once moved from
  std::size_t worker_ = 0;
  std::size_t descriptors_ = 0;
};

struct ListenerOptions {
  std::string host = "127.0.0.1";  // a name or an address; "0.0.0.0" / "::" for all
  uint16_t port = 0;               // 0: any free port (see port())
  // Taken from the process's descriptor budget per connection; 0: not counted (health and
  // metrics ports, which must answer while clients hold the budget: cap them instead).
  std::size_t descriptors_per_connection = 1;
  std::string log_name = "http";  // the back-off warnings' prefix
};

class Listener {
 public:
  // On worker 0, with the connection's socket (on its worker's loop) and its slot.
  using OnAccept = std::function<void(boost::asio::ip::tcp::socket socket, ConnectionSlot slot)>;

  // Binds and listens now. Throws std::runtime_error with the system's reason.
  Listener(ListenerOptions options, IoWorkers& workers, std::shared_ptr<ConnectionCounts> counts);
  ~Listener();  // close()
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  uint16_t port() const;
  // Starts the accept loop on worker 0 (which runs it once the workers run).
  void start(OnAccept on_accept);
  // Stops accepting: once it returns, OnAccept is not called again and the waiting accept has
  // given back what it reserved (when the workers run it waits for worker 0). Idempotent;
  // from any thread.
  void close();

 private:
  struct State;
  std::shared_ptr<State> state_;  // the pending accept and back-off timer hold it too
  bool closed_ = false;           // the owner's: close() has run
};

}  // namespace llmd::http
