#include "common/http/listener.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <limits>
#include <stdexcept>
#include <utility>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <spdlog/spdlog.h>

#include "common/http/descriptor_budget.h"
#include "common/http/io_workers.h"

namespace llmd::http {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;

ConnectionCounts::ConnectionCounts(std::size_t workers, std::size_t max_connections)
    : cap_(max_connections == 0 ? std::numeric_limits<std::size_t>::max() / 2 : max_connections),
      per_worker_(std::max<std::size_t>(1, workers)) {}

std::size_t ConnectionCounts::least_loaded() const {
  std::size_t best = 0;
  for (std::size_t i = 1; i < per_worker_.size(); ++i) {
    if (per_worker_[i].load() < per_worker_[best].load()) {
      best = i;
    }
  }
  return best;
}

ConnectionSlot::ConnectionSlot(std::shared_ptr<ConnectionCounts> counts, std::size_t worker,
                               std::size_t descriptors)
    : counts_(std::move(counts)), worker_(worker), descriptors_(descriptors) {
  counts_->per_worker_.at(worker_).fetch_add(1);
}

ConnectionSlot::ConnectionSlot(ConnectionSlot&& other) noexcept
    : counts_(std::move(other.counts_)), worker_(other.worker_), descriptors_(other.descriptors_) {}

ConnectionSlot& ConnectionSlot::operator=(ConnectionSlot&& other) noexcept {
  if (this != &other) {
    release();
    counts_ = std::move(other.counts_);
    worker_ = other.worker_;
    descriptors_ = other.descriptors_;
  }
  return *this;
}

ConnectionSlot::~ConnectionSlot() {
  release();
}

void ConnectionSlot::release() {
  if (!counts_) {
    return;
  }
  counts_->per_worker_.at(worker_).fetch_sub(1);
  counts_->cap_.give_back(1);
  DescriptorBudget::process().give_back(descriptors_);
  counts_.reset();
}

// Everything below runs on worker 0 except the constructor (the owner's, before start()).
struct Listener::State : std::enable_shared_from_this<Listener::State> {
  State(ListenerOptions o, IoWorkers& w, std::shared_ptr<ConnectionCounts> c)
      : options(std::move(o)),
        workers(w),
        counts(std::move(c)),
        acceptor(w.at(0)),
        retry(w.at(0)) {}

  void bind();
  void accept();
  // Reserves a connection's place under the cap and its descriptors; false (and why) at a limit.
  bool reserve(std::string& why);
  void unreserve();
  void on_accepted(error_code ec, tcp::socket socket, std::size_t worker);
  // Accepts again after a pause (10 ms doubling to 1 s), logging `why` when the pauses start and
  // while they last at the longest.
  void accept_later(const std::string& why);
  void close_now();

  const ListenerOptions options;
  IoWorkers& workers;
  const std::shared_ptr<ConnectionCounts> counts;
  tcp::acceptor acceptor;
  asio::steady_timer retry;
  uint16_t port = 0;  // set by bind(), then read-only
  OnAccept on_accept;
  bool closed = false;
  std::chrono::milliseconds backoff{0};
};

void Listener::State::bind() {
  tcp::resolver resolver(workers.at(0));
  const auto results = resolver.resolve(options.host, std::to_string(options.port),
                                        tcp::resolver::passive | tcp::resolver::numeric_service);
  const tcp::endpoint endpoint = results.begin()->endpoint();
  acceptor.open(endpoint.protocol());
  acceptor.set_option(asio::socket_base::reuse_address(true));
  acceptor.bind(endpoint);
  acceptor.listen(asio::socket_base::max_listen_connections);
  port = acceptor.local_endpoint().port();
}

bool Listener::State::reserve(std::string& why) {
  if (!counts->cap_.try_take(1)) {
    why = "the port's " + std::to_string(counts->cap_.capacity()) + " connections are open";
    return false;
  }
  // At the process's budget new connections wait in the backlog, and the process keeps the
  // descriptors it needs for its own connections and files.
  auto& budget = DescriptorBudget::process();
  if (!budget.try_take(options.descriptors_per_connection)) {
    counts->cap_.give_back(1);
    why = "connections hold the descriptors the process gives to clients (" +
          std::to_string(budget.held()) + " of " + std::to_string(budget.capacity()) + ")";
    return false;
  }
  return true;
}

void Listener::State::unreserve() {
  counts->cap_.give_back(1);
  DescriptorBudget::process().give_back(options.descriptors_per_connection);
}

void Listener::State::accept() {
  if (closed) {
    return;
  }
  std::string why;
  if (!reserve(why)) {
    accept_later(why);
    return;
  }
  const std::size_t worker = counts->least_loaded();
  acceptor.async_accept(workers.at(worker),
                        [self = shared_from_this(), worker](error_code ec, tcp::socket socket) {
                          self->on_accepted(ec, std::move(socket), worker);
                        });
}

void Listener::State::on_accepted(error_code ec, tcp::socket socket, std::size_t worker) {
  if (closed) {
    unreserve();
    return;
  }
  if (ec) {
    // Out of descriptors (EMFILE: something else holds them) the pending connection stays in
    // the backlog and the listener stays readable: back off instead of spinning.
    unreserve();
    accept_later("accept failed: " + ec.message());
    return;
  }
  backoff = std::chrono::milliseconds(0);
  error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
  on_accept(std::move(socket), ConnectionSlot(counts, worker, options.descriptors_per_connection));
  accept();
}

void Listener::State::accept_later(const std::string& why) {
  backoff = std::clamp(backoff * 2, std::chrono::milliseconds(10), std::chrono::milliseconds(1000));
  if (backoff == std::chrono::milliseconds(10) || backoff == std::chrono::milliseconds(1000)) {
    spdlog::warn("{}: {} on port {}; accepting again in {} ms", options.log_name, why, port,
                 backoff.count());
  }
  retry.expires_after(backoff);
  retry.async_wait([self = shared_from_this()](error_code ec) {
    if (!ec) {
      self->accept();
    }
  });
}

void Listener::State::close_now() {
  closed = true;
  error_code ignored;
  acceptor.close(ignored);
  retry.cancel();
}

Listener::Listener(ListenerOptions options, IoWorkers& workers,
                   std::shared_ptr<ConnectionCounts> counts)
    : state_(std::make_shared<State>(std::move(options), workers, std::move(counts))) {
  state_->bind();
}

Listener::~Listener() {
  close();
}

uint16_t Listener::port() const {
  return state_->port;
}

void Listener::start(OnAccept on_accept) {
  state_->on_accept = std::move(on_accept);
  asio::post(state_->workers.at(0), [s = state_] { s->accept(); });
}

void Listener::close() {
  if (std::exchange(closed_, true)) {
    return;
  }
  const auto s = state_;
  if (!s->workers.running() || s->workers.current() == 0) {
    s->close_now();
    return;
  }
  // The accept handler runs on worker 0 too: once this has run there, it sees `closed`; the
  // aborted accept's and timer's handlers are queued by then, so the second post runs after
  // them and the aborted accept has given its reservation back.
  std::promise<void> done;
  asio::post(s->workers.at(0), [s, &done] {
    s->close_now();
    asio::post(s->workers.at(0), [&done] { done.set_value(); });
  });
  done.get_future().wait();
}

}  // namespace llmd::http
