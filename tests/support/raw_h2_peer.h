#pragma once
// A hostile HTTP/2 client for tests and benchmarks that play the peer the gRPC library never
// is: raw nghttp2 on one blocking loopback socket, streams that send exactly what they are given
// (a body without END_STREAM stays open and can be continued), and a record of what the server
// did to them and to the connection. Used on one thread.
#include <nghttp2/nghttp2.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace llmd::testing {

// A gRPC message's 5-byte prefix: the compressed flag and the announced length.
inline std::string grpc_prefix(unsigned char flag, uint32_t length) {
  return {static_cast<char>(flag), static_cast<char>(length >> 24), static_cast<char>(length >> 16),
          static_cast<char>(length >> 8), static_cast<char>(length)};
}

// A TCP connection to 127.0.0.1:`port` whose reads give up after `receive_timeout`.
inline int connect_loopback(uint16_t port, timeval receive_timeout, bool& connected) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  connected = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  const int one = 1;  // as every HTTP/2 client: a WINDOW_UPDATE must not wait for an ACK
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &receive_timeout, sizeof(receive_timeout));
  return fd;
}

// One connection: streams that send what they are given and no more (a body without
// END_STREAM stays open until continue_body()), and what the server does to them and to the
// connection. `Open::kNothing` sends no byte, `kPrefaceOnly` the 24-byte preface without
// SETTINGS; `kHandshake` the preface and SETTINGS, as every real client does.
class RawPeer {
 public:
  enum class Open { kNothing, kPrefaceOnly, kHandshake };
  // `window`: the SETTINGS_INITIAL_WINDOW_SIZE it announces (0: the server can send it no DATA
  // until it opens its windows with open_windows()). `gives_window` false: it reads what comes
  // but never gives the window back, so the server can send it `window` bytes per stream (and
  // 64 KiB on the connection) and no more: a peer that stops reading its responses.
  explicit RawPeer(uint16_t port, Open open = Open::kHandshake, uint32_t window = 65535,
                   bool gives_window = true) {
    fd_ = connect_loopback(port, {0, 20000}, connected_);  // reads return every 20 ms
    if (open == Open::kPrefaceOnly) {
      const std::string preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
      ::send(fd_, preface.data(), preface.size(), MSG_NOSIGNAL);
    }
    if (open != Open::kHandshake) {
      return;
    }
    nghttp2_session_callbacks* cbs = nullptr;
    nghttp2_session_callbacks_new(&cbs);
    nghttp2_session_callbacks_set_send_callback(cbs, &on_send);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, &on_frame);
    nghttp2_session_callbacks_set_on_header_callback(cbs, &on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, &on_data);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, &on_close);
    nghttp2_option* option = nullptr;
    nghttp2_option_new(&option);
    nghttp2_option_set_no_auto_window_update(option, gives_window ? 0 : 1);
    nghttp2_session_client_new2(&session_, cbs, this, option);
    nghttp2_option_del(option);
    nghttp2_session_callbacks_del(cbs);
    const nghttp2_settings_entry settings[] = {{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, window}};
    nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings, 1);
  }
  ~RawPeer() {
    if (session_ != nullptr) {
      nghttp2_session_del(session_);
    }
    ::close(fd_);
  }

  // A stream on `path` carrying `body`; END_STREAM only with `end`.
  int32_t open(const std::string& path, std::string body, bool end,
               const std::vector<std::pair<std::string, std::string>>& extra = {}) {
    std::vector<std::pair<std::string, std::string>> h{{":method", "POST"},
                                                       {":scheme", "http"},
                                                       {":path", path},
                                                       {":authority", "localhost"},
                                                       {"content-type", "application/grpc"},
                                                       {"te", "trailers"}};
    h.insert(h.end(), extra.begin(), extra.end());
    std::vector<nghttp2_nv> nv;
    for (auto& [n, v] : h) {
      nv.push_back({reinterpret_cast<uint8_t*>(n.data()), reinterpret_cast<uint8_t*>(v.data()),
                    n.size(), v.size(), NGHTTP2_NV_FLAG_NONE});
    }
    auto body_source = std::make_unique<Body>(Body{std::move(body), 0, end});
    nghttp2_data_provider provider{};
    provider.source.ptr = body_source.get();
    provider.read_callback = &read_body;
    const int32_t id =
        nghttp2_submit_request(session_, nullptr, nv.data(), nv.size(), &provider, nullptr);
    by_stream_[id] = body_source.get();
    bodies_.push_back(std::move(body_source));
    nghttp2_session_send(session_);
    return id;
  }
  // More of an open stream's body (it was opened without `end`); `end`: the last of it.
  void continue_body(int32_t stream, const std::string& more, bool end) {
    const auto it = by_stream_.find(stream);
    if (it == by_stream_.end()) {
      return;
    }
    it->second->bytes.append(more);
    it->second->end = end;
    nghttp2_session_resume_data(session_, stream);
    nghttp2_session_send(session_);
  }
  // Request body bytes nghttp2 still holds for `stream` (the server's window has not let out).
  std::size_t unsent(int32_t stream) const {
    const auto it = by_stream_.find(stream);
    return it == by_stream_.end() ? 0 : it->second->bytes.size() - it->second->pos;
  }

  // Sends what is pending and reads until `done()` holds, the server closes the connection or
  // `bound` passes (a hang guard, not a timing assertion); done()'s value.
  bool pump(const std::function<bool()>& done,
            std::chrono::milliseconds bound = std::chrono::seconds(20)) {
    const auto end = std::chrono::steady_clock::now() + bound;
    while (!done() && !eof && std::chrono::steady_clock::now() < end) {
      if (session_ != nullptr) {
        nghttp2_session_send(session_);
      }
      uint8_t buffer[16384];
      const ssize_t n = ::recv(fd_, buffer, sizeof(buffer), 0);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
        eof = true;
      } else if (n > 0 && session_ != nullptr) {
        nghttp2_session_mem_recv(session_, buffer, static_cast<std::size_t>(n));
      }
    }
    return done();
  }
  bool wait_closed() {
    return pump([] { return false; }), eof;
  }

  // A reader at last: 1 GiB more of window for every stream and the connection.
  void open_windows() {
    const nghttp2_settings_entry settings[] = {{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1u << 30}};
    nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings, 1);
    nghttp2_submit_window_update(session_, NGHTTP2_FLAG_NONE, 0, 1 << 30);
  }
  // Of the request body of the stream opened `n`-th (from 0): the bytes nghttp2 has sent.
  std::size_t sent(std::size_t n) const { return bodies_.at(n)->pos; }
  // The window the server has given this peer for `stream` (what it may send before more).
  int32_t send_window(int32_t stream) const {
    return std::min(nghttp2_session_get_stream_remote_window_size(session_, stream),
                    nghttp2_session_get_remote_window_size(session_));
  }

  // Sends until the server's window stops it for good, or `all_sent()`: a window of 0 that is
  // still 0 after two PING round trips (by the second ACK every WINDOW_UPDATE the server wrote
  // for the bytes sent before the first has arrived). False on a close or the hang guard.
  bool send_until_stuck(int32_t stream, const std::function<bool()>& all_sent) {
    while (pump([&] { return all_sent() || send_window(stream) == 0; })) {
      if (all_sent()) {
        return true;
      }
      for (int round = 0; round < 2; ++round) {
        const int acks = ping_acks;
        nghttp2_submit_ping(session_, NGHTTP2_FLAG_NONE, nullptr);
        if (!pump([&] { return ping_acks > acks; })) {
          return false;
        }
      }
      if (send_window(stream) == 0) {
        return true;
      }
    }
    return false;
  }

  bool connected() const { return connected_; }
  int ping_acks = 0;
  bool eof = false;                    // the server closed the connection
  bool goaway = false;                 // a GOAWAY arrived
  std::map<int32_t, uint32_t> closed;  // stream -> RST_STREAM code (0: closed normally)
  std::map<int32_t, std::map<std::string, std::string>> fields;
  std::map<int32_t, std::string> data;  // per stream, the response DATA

 private:
  struct Body {
    std::string bytes;
    std::size_t pos;
    bool end;
  };
  static ssize_t on_send(nghttp2_session*, const uint8_t* data, std::size_t n, int, void* self) {
    return ::send(static_cast<RawPeer*>(self)->fd_, data, n, MSG_NOSIGNAL);
  }
  static int on_frame(nghttp2_session*, const nghttp2_frame* f, void* self) {
    if (f->hd.type == NGHTTP2_GOAWAY) {
      static_cast<RawPeer*>(self)->goaway = true;
    }
    if (f->hd.type == NGHTTP2_PING && (f->hd.flags & NGHTTP2_FLAG_ACK) != 0) {
      ++static_cast<RawPeer*>(self)->ping_acks;
    }
    return 0;
  }
  static int on_header(nghttp2_session*, const nghttp2_frame* f, const uint8_t* name,
                       std::size_t namelen, const uint8_t* value, std::size_t valuelen, uint8_t,
                       void* self) {
    static_cast<RawPeer*>(self)
        ->fields[f->hd.stream_id][std::string(reinterpret_cast<const char*>(name), namelen)] =
        std::string(reinterpret_cast<const char*>(value), valuelen);
    return 0;
  }
  static int on_data(nghttp2_session*, uint8_t, int32_t id, const uint8_t* data, std::size_t n,
                     void* self) {
    static_cast<RawPeer*>(self)->data[id].append(reinterpret_cast<const char*>(data), n);
    return 0;
  }
  static int on_close(nghttp2_session*, int32_t id, uint32_t code, void* self) {
    static_cast<RawPeer*>(self)->closed[id] = code;
    return 0;
  }
  static ssize_t read_body(nghttp2_session*, int32_t, uint8_t* buf, std::size_t length,
                           uint32_t* flags, nghttp2_data_source* source, void*) {
    auto& b = *static_cast<Body*>(source->ptr);
    const std::size_t n = std::min(length, b.bytes.size() - b.pos);
    std::copy_n(b.bytes.data() + b.pos, n, buf);
    b.pos += n;
    if (b.pos == b.bytes.size()) {
      if (!b.end) {
        return n > 0 ? static_cast<ssize_t>(n) : ssize_t{NGHTTP2_ERR_DEFERRED};  // stays open
      }
      *flags |= NGHTTP2_DATA_FLAG_EOF;
    }
    return static_cast<ssize_t>(n);
  }

  int fd_ = -1;
  bool connected_ = false;
  nghttp2_session* session_ = nullptr;
  std::vector<std::unique_ptr<Body>> bodies_;
  std::map<int32_t, Body*> by_stream_;
};

}  // namespace llmd::testing
