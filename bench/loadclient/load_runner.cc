#include "bench/loadclient/load_runner.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <deque>
#include <memory>
#include <optional>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "bench/loadclient/sse.h"
#include "common/http/client.h"

namespace llmd::loadclient {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::uint64_t kBodyLimit = 64ull * 1024 * 1024;
constexpr std::uint32_t kHeaderLimit = 64 * 1024;

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) {
    if (c >= 'A' && c <= 'Z') {
      c = static_cast<char>(c - 'A' + 'a');
    }
  }
  return out;
}

// An SLO header value in ms; nullopt when it is not a number.
std::optional<double> parse_ms(const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || *end != '\0' || !std::isfinite(v)) {
    return std::nullopt;
  }
  return v;
}

bool is_stale(const beast::error_code& ec) {
  return ec == bhttp::error::end_of_stream || ec == asio::error::eof ||
         ec == asio::error::connection_reset || ec == asio::error::broken_pipe ||
         ec == asio::error::connection_aborted;
}

tcp::endpoint loopback_endpoint(const std::string& host, uint16_t port) {
  if (!is_loopback_host(host)) {
    throw std::invalid_argument("target host '" + host +
                                "' is not loopback (only 127.0.0.0/8, ::1, localhost)");
  }
  const std::string h = host == "localhost" ? "127.0.0.1" : host;
  beast::error_code ec;
  auto addr = asio::ip::make_address(h.front() == '[' ? h.substr(1, h.size() - 2) : h, ec);
  if (ec) {
    throw std::invalid_argument("bad target host '" + host + "'");
  }
  return {addr, port};
}

struct Exchange {
  std::string method;
  std::string target;
  std::string body;
  std::vector<http::Header> headers;
  std::chrono::milliseconds timeout{30000};
};

struct ExchangeHandlers {
  std::function<void(int status, std::vector<http::Header> headers, bool chunked)> on_headers;
  std::function<void(std::string_view bytes)> on_body;
  // error empty = complete; keep_alive tells whether the connection can be reused.
  std::function<void(const std::string& error, bool keep_alive)> on_done;
};

// One keep-alive HTTP/1.1 connection running one exchange at a time on the io thread.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(asio::io_context& ioc, tcp::endpoint endpoint)
      : socket_(ioc), timer_(ioc), endpoint_(endpoint) {}

  void start(Exchange ex, ExchangeHandlers handlers) {
    ex_ = std::move(ex);
    handlers_ = std::move(handlers);
    got_response_ = false;
    finished_ = false;
    abort_reason_.clear();
    retried_ = false;
    timer_.expires_after(ex_.timeout);
    timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (!ec && !self->finished_) {
        self->abort("timeout after " + std::to_string(self->ex_.timeout.count()) + " ms");
      }
    });
    begin();
  }

  // Fails the running exchange with `reason` (closing the socket).
  void abort(const std::string& reason) {
    if (finished_) {
      return;
    }
    abort_reason_ = reason;
    beast::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
  }

  void close() {
    beast::error_code ec;
    socket_.close(ec);
    timer_.cancel();
  }

  bool open() const { return socket_.is_open(); }

 private:
  void begin() {
    reused_ = socket_.is_open();
    if (reused_) {
      return write();
    }
    socket_.async_connect(endpoint_, [self = shared_from_this()](beast::error_code ec) {
      if (ec) {
        return self->fail("connect: " + ec.message());
      }
      beast::error_code ignored;
      self->socket_.set_option(tcp::no_delay(true), ignored);
      self->write();
    });
  }

  void write() {
    wire_.clear();
    wire_ += ex_.method + " " + ex_.target + " HTTP/1.1\r\n";
    wire_ += "Host: " + endpoint_.address().to_string() + ":" + std::to_string(endpoint_.port()) +
             "\r\n";
    bool has_ct = false;
    for (const auto& h : ex_.headers) {
      has_ct = has_ct || lower(h.name) == "content-type";
      wire_ += h.name + ": " + h.value + "\r\n";
    }
    if (!ex_.body.empty() || ex_.method == "POST") {
      if (!has_ct) {
        wire_ += "Content-Type: application/json\r\n";
      }
      wire_ += "Content-Length: " + std::to_string(ex_.body.size()) + "\r\n";
    }
    wire_ += "\r\n";
    wire_ += ex_.body;
    asio::async_write(socket_, asio::buffer(wire_),
                      [self = shared_from_this()](beast::error_code ec, std::size_t) {
                        if (ec) {
                          return self->on_io_error("write", ec);
                        }
                        self->read_header();
                      });
  }

  void read_header() {
    parser_.emplace();
    parser_->header_limit(kHeaderLimit);
    parser_->body_limit(kBodyLimit);
    bhttp::async_read_header(socket_, buffer_, *parser_,
                             [self = shared_from_this()](beast::error_code ec, std::size_t) {
                               if (ec) {
                                 return self->on_io_error("read header", ec);
                               }
                               self->on_header();
                             });
  }

  void on_header() {
    got_response_ = true;
    auto& msg = parser_->get();
    std::vector<http::Header> headers;
    for (const auto& f : msg) {
      headers.push_back({lower(std::string_view(f.name_string().data(), f.name_string().size())),
                         std::string(f.value())});
    }
    if (handlers_.on_headers) {
      handlers_.on_headers(static_cast<int>(msg.result_int()), std::move(headers),
                           parser_->chunked());
    }
    deliver_and_continue();
  }

  void deliver_and_continue() {
    auto& body = parser_->get().body();
    if (!body.empty()) {
      if (handlers_.on_body) {
        handlers_.on_body(body);
      }
      body.clear();
    }
    if (parser_->is_done()) {
      const bool keep = parser_->keep_alive();
      finish({}, keep);
      return;
    }
    bhttp::async_read_some(socket_, buffer_, *parser_,
                           [self = shared_from_this()](beast::error_code ec, std::size_t) {
                             if (ec) {
                               return self->on_io_error("read body", ec);
                             }
                             self->deliver_and_continue();
                           });
  }

  void on_io_error(const char* stage, const beast::error_code& ec) {
    if (!abort_reason_.empty()) {
      return fail(abort_reason_);
    }
    if (reused_ && !got_response_ && !retried_ && is_stale(ec)) {
      // The server closed the idle connection before our request: reconnect once.
      retried_ = true;
      beast::error_code ignored;
      socket_.close(ignored);
      buffer_.consume(buffer_.size());
      return begin();
    }
    fail(std::string(stage) + ": " + ec.message());
  }

  void fail(const std::string& error) {
    beast::error_code ignored;
    socket_.close(ignored);
    buffer_.consume(buffer_.size());
    finish(abort_reason_.empty() ? error : abort_reason_, false);
  }

  void finish(const std::string& error, bool keep_alive) {
    if (finished_) {
      return;
    }
    finished_ = true;
    timer_.cancel();
    if (!keep_alive) {
      beast::error_code ignored;
      socket_.close(ignored);
    }
    auto done = std::move(handlers_.on_done);
    handlers_ = {};
    if (done) {
      done(error, keep_alive && socket_.is_open());
    }
  }

  tcp::socket socket_;
  asio::steady_timer timer_;
  tcp::endpoint endpoint_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::response_parser<bhttp::string_body>> parser_;
  Exchange ex_;
  ExchangeHandlers handlers_;
  std::string wire_;
  std::string abort_reason_;
  bool reused_ = false;
  bool retried_ = false;
  bool got_response_ = false;
  bool finished_ = true;
};

using ConnectionPtr = std::shared_ptr<Connection>;

class Runner {
 public:
  Runner(const workload::Trace& trace, const RunnerConfig& config,
         const std::function<void(const RequestRecord&)>& on_record)
      : trace_(trace),
        config_(config),
        on_record_(on_record),
        arrival_timer_(ioc_),
        wall_timer_(ioc_) {
    auto url = http::parse_url(config.url);
    if (!url) {
      throw std::invalid_argument("bad target URL '" + config.url +
                                  "' (expected http://host:port)");
    }
    endpoint_ = loopback_endpoint(url->host, url->port);
    target_ = url->base_path + std::string(api_path(config.request.api));
    endpoint_name_ = url->host + ":" + std::to_string(url->port);
    if (config.max_requests < 1 || !(config.max_duration_s > 0) ||
        !(config.request_timeout_s > 0) || config.max_in_flight < 1 ||
        config.max_in_flight > 4096) {
      throw std::invalid_argument(
          "runner config: need max_requests >= 1, max_duration_s > 0, request_timeout_s > 0, "
          "max_in_flight in [1, 4096]");
    }
    planned_ =
        std::min<std::size_t>(trace.requests.size(), static_cast<std::size_t>(config.max_requests));
  }

  RunResult run() {
    t0_ = Clock::now();
    wall_timer_.expires_after(std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(config_.max_duration_s)));
    wall_timer_.async_wait([this](beast::error_code ec) {
      if (!ec) {
        stop_for_wall_cap();
      }
    });
    schedule_arrival();
    check_done();
    ioc_.run();
    RunResult result;
    result.wall_ms = now_ms();
    result.records = std::move(records_);
    std::sort(result.records.begin(), result.records.end(),
              [](const RequestRecord& a, const RequestRecord& b) { return a.index < b.index; });
    result.not_sent = static_cast<int64_t>(trace_.requests.size() - sent_);
    result.stopped_by_wall_cap = stopped_;
    return result;
  }

 private:
  struct Session {
    Conversation conversation;
    std::deque<std::size_t> pending;
    bool busy = false;
  };

  double now_ms() const {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0_).count();
  }

  void schedule_arrival() {
    if (stopped_ || next_ >= planned_) {
      return;
    }
    const auto& r = trace_.requests[next_];
    arrival_timer_.expires_at(t0_ + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double, std::milli>(r.arrival_ms)));
    arrival_timer_.async_wait([this](beast::error_code ec) {
      if (ec || stopped_) {
        return;
      }
      // Everything due by now arrives in this wake-up.
      const double now = now_ms();
      while (next_ < planned_ && trace_.requests[next_].arrival_ms <= now) {
        arrive(next_++);
      }
      schedule_arrival();
      check_done();
    });
  }

  void arrive(std::size_t i) {
    Session& s = sessions_[trace_.requests[i].session];
    if (s.busy) {
      s.pending.push_back(i);
      return;
    }
    s.busy = true;
    ready(i);
  }

  void ready(std::size_t i) {
    if (in_flight_ >= config_.max_in_flight) {
      backlog_.push_back(i);
      return;
    }
    send(i);
  }

  ConnectionPtr take_connection() {
    while (!idle_.empty()) {
      auto c = std::move(idle_.back());
      idle_.pop_back();
      if (c->open()) {
        return c;
      }
    }
    return std::make_shared<Connection>(ioc_, endpoint_);
  }

  void send(std::size_t i) {
    const auto& tr = trace_.requests[i];
    Session& s = sessions_[tr.session];
    if (tr.turn == 0) {
      s.conversation.reset(trace_.system_prompt(tr.group));
    }
    auto record = std::make_shared<RequestRecord>();
    record->index = tr.index;
    record->stage = tr.stage;
    record->session = tr.session;
    record->turn = tr.turn;
    record->scheduled_ms = tr.arrival_ms;
    record->max_tokens = tr.max_tokens;
    record->endpoint = endpoint_name_;
    Exchange ex;
    ex.method = "POST";
    ex.target = target_;
    ex.body = s.conversation.body(trace_.question(tr), tr.max_tokens, tr.priority, config_.request);
    record->prompt_words = s.conversation.last_prompt_words();
    ex.headers = config_.headers;
    auto note_slo = [&record](const std::string& name, const std::string& value) {
      const std::string n = lower(name);
      if (n == "x-slo-ttft-ms") {
        record->slo_ttft_ms = parse_ms(value);
      } else if (n == "x-slo-tpot-ms") {
        record->slo_tpot_ms = parse_ms(value);
      }
    };
    for (const auto& h : config_.headers) {
      note_slo(h.name, h.value);
    }
    for (const auto& [name, value] : tr.headers) {
      ex.headers.push_back({name, value});
      note_slo(name, value);
    }
    ex.headers.push_back({"x-request-id", "loadclient-" + std::to_string(tr.index)});
    ex.timeout =
        std::chrono::milliseconds(static_cast<int64_t>(config_.request_timeout_s * 1000.0));

    auto acc = std::make_shared<ResponseAccumulator>();
    auto sse = std::make_shared<SseParser>(
        [this, acc](std::string_view data) { acc->on_event(data, now_ms()); });
    auto whole = std::make_shared<std::string>();
    auto streaming = std::make_shared<bool>(false);
    auto conn = take_connection();
    active_.insert(conn);
    ++in_flight_;
    ++sent_;
    record->sent_ms = now_ms();

    ExchangeHandlers h;
    h.on_headers = [record, streaming](int status, std::vector<http::Header> headers, bool) {
      record->status = status;
      for (const auto& hd : headers) {
        if (hd.name == "content-type") {
          *streaming = hd.value.find("text/event-stream") != std::string::npos;
        } else if (hd.name == "x-gateway-destination-endpoint") {
          record->endpoint = hd.value;
        }
      }
    };
    h.on_body = [sse, whole, streaming](std::string_view bytes) {
      if (*streaming) {
        sse->feed(bytes);
      } else if (whole->size() < kBodyLimit) {
        whole->append(bytes);
      }
    };
    h.on_done = [this, i, record, acc, sse, whole, streaming, conn](const std::string& error,
                                                                    bool keep_alive) {
      const double t = now_ms();
      if (error.empty()) {
        if (*streaming) {
          sse->finish();
        } else if (record->status == 200) {
          acc->on_body(*whole, t);
        }
      }
      record->end_ms = t;
      record->first_token_ms = acc->first_content_ms();
      record->content_chunks = acc->content_chunks();
      record->prompt_tokens = acc->prompt_tokens().value_or(-1);
      record->completion_tokens = acc->completion_tokens().value_or(-1);
      record->cached_tokens = acc->cached_tokens().value_or(-1);
      if (!error.empty()) {
        record->error = error;
      } else if (record->status != 200) {
        record->error = "HTTP " + std::to_string(record->status) + ": " + whole->substr(0, 300);
      } else if (!acc->error().empty()) {
        record->error = acc->error();
      } else if (!acc->done()) {
        record->error = "stream ended without [DONE]";
      }
      record->ok = record->error.empty() && record->status == 200 && record->first_token_ms >= 0;
      if (record->ok == false && record->error.empty()) {
        record->error = "no content in response";
      }
      active_.erase(conn);
      if (keep_alive && !stopped_) {
        idle_.push_back(conn);
      } else {
        conn->close();
      }
      --in_flight_;
      complete(i, *record, acc->text());
    };
    conn->start(std::move(ex), std::move(h));
  }

  void complete(std::size_t i, const RequestRecord& record, const std::string& text) {
    Session& s = sessions_[trace_.requests[i].session];
    if (record.ok) {
      s.conversation.answer(text);
    } else {
      s.conversation.drop_question();
    }
    records_.push_back(record);
    if (on_record_) {
      on_record_(record);
    }
    if (!stopped_) {
      if (!s.pending.empty()) {
        const std::size_t next = s.pending.front();
        s.pending.pop_front();
        ready(next);
      } else {
        s.busy = false;
      }
      while (in_flight_ < config_.max_in_flight && !backlog_.empty()) {
        const std::size_t next = backlog_.front();
        backlog_.pop_front();
        send(next);
      }
    }
    check_done();
  }

  void check_done() {
    if (in_flight_ == 0 && (stopped_ || (next_ >= planned_ && backlog_.empty()))) {
      wall_timer_.cancel();
      arrival_timer_.cancel();
      for (auto& c : idle_) {
        c->close();
      }
      idle_.clear();
    }
  }

  void stop_for_wall_cap() {
    if (stopped_) {
      return;
    }
    stopped_ = true;
    arrival_timer_.cancel();
    backlog_.clear();
    auto active = active_;
    for (auto& c : active) {
      c->abort("aborted: wall-clock cap reached");
    }
    check_done();
  }

  const workload::Trace& trace_;
  const RunnerConfig& config_;
  const std::function<void(const RequestRecord&)>& on_record_;
  asio::io_context ioc_{1};
  asio::steady_timer arrival_timer_;
  asio::steady_timer wall_timer_;
  tcp::endpoint endpoint_;
  std::string target_;
  std::string endpoint_name_;
  Clock::time_point t0_;
  std::size_t planned_ = 0;
  std::size_t next_ = 0;
  std::size_t sent_ = 0;
  int in_flight_ = 0;
  bool stopped_ = false;
  std::unordered_map<uint64_t, Session> sessions_;
  std::deque<std::size_t> backlog_;
  std::vector<ConnectionPtr> idle_;
  std::unordered_set<ConnectionPtr> active_;
  std::vector<RequestRecord> records_;
};

}  // namespace

bool is_loopback_host(const std::string& host) {
  if (host == "localhost" || host == "::1" || host == "[::1]") {
    return true;
  }
  beast::error_code ec;
  auto addr = asio::ip::make_address(host, ec);
  return !ec && addr.is_v4() && addr.to_v4().to_bytes()[0] == 127;
}

RunResult run_load(const workload::Trace& trace, const RunnerConfig& config,
                   const std::function<void(const RequestRecord&)>& on_record) {
  Runner runner(trace, config, on_record);
  return runner.run();
}

std::string_view FetchResult::header(std::string_view name) const {
  const std::string n = lower(name);
  for (const auto& h : headers) {
    if (h.name == n) {
      return h.value;
    }
  }
  return {};
}

FetchResult fetch(const std::string& host, uint16_t port, const std::string& method,
                  const std::string& target, const std::string& body,
                  const std::vector<http::Header>& headers, std::chrono::milliseconds timeout) {
  asio::io_context ioc{1};
  FetchResult result;
  const auto endpoint = loopback_endpoint(host, port);
  auto conn = std::make_shared<Connection>(ioc, endpoint);
  const auto t0 = Clock::now();
  auto since = [t0] {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  };
  Exchange ex{method, target, body, headers, timeout};
  ExchangeHandlers h;
  h.on_headers = [&result](int status, std::vector<http::Header> hs, bool chunked) {
    result.status = status;
    result.headers = std::move(hs);
    result.chunked = chunked;
  };
  h.on_body = [&result, &since](std::string_view bytes) {
    result.body.append(bytes);
    result.pieces.emplace_back(since(), std::string(bytes));
  };
  h.on_done = [&result](const std::string& error, bool keep_alive) {
    result.error = error;
    result.keep_alive = keep_alive;
  };
  conn->start(std::move(ex), std::move(h));
  ioc.run();
  conn->close();
  return result;
}

}  // namespace llmd::loadclient
