#pragma once
// HTTPS on loopback for tests: self-signed certificates made by the openssl tool, and a server
// that answers each request from a function of its head. Used by the client core's TLS tests
// and the EPP scraper's https scrapes.
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/write.hpp>

#include "common/http/client.h"

namespace llmd::http::testing {

// A self-signed certificate for 127.0.0.1 and localhost (also its own CA), by the openssl tool.
class Certificates {
 public:
  Certificates() {
    char pattern[] = "/tmp/llmd_tls_XXXXXX";
    dir_ = ::mkdtemp(pattern);
  }
  ~Certificates() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  bool make(const std::string& name) {
    const std::string cmd =
        "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=test "
        "-addext subjectAltName=IP:127.0.0.1,DNS:localhost -keyout " +
        key(name) + " -out " + cert(name) + " > /dev/null 2>&1";
    return std::system(cmd.c_str()) == 0;
  }
  std::string cert(const std::string& name) const { return dir_ + "/" + name + ".crt"; }
  std::string key(const std::string& name) const { return dir_ + "/" + name + ".key"; }

 private:
  std::string dir_;
};

// An HTTPS server on loopback: keep-alive, one connection at a time; `answer` turns a request's
// head (request line and headers) into the whole response.
class TlsServer {
 public:
  using Answer = std::function<std::string(const std::string& head)>;
  TlsServer(const std::string& cert, const std::string& key, Answer answer)
      : answer_(std::move(answer)),
        acceptor_(ioc_, {boost::asio::ip::make_address("127.0.0.1"), 0}) {
    ctx_.use_certificate_chain_file(cert);
    ctx_.use_private_key_file(key, boost::asio::ssl::context::pem);
    port_ = acceptor_.local_endpoint().port();
    thread_ = std::thread([this] { serve(); });
  }
  ~TlsServer() {
    ::shutdown(acceptor_.native_handle(), SHUT_RDWR);  // ends the blocking accept
    thread_.join();
  }
  Url url() const {
    Url u;
    u.host = "127.0.0.1";
    u.port = port_;
    u.tls = true;
    return u;
  }
  uint16_t port() const { return port_; }
  int handshakes() const { return handshakes_; }

 private:
  void serve() {
    namespace asio = boost::asio;
    while (true) {
      boost::system::error_code ec;
      asio::ip::tcp::socket socket(ioc_);
      acceptor_.accept(socket, ec);
      if (ec) {
        return;
      }
      asio::ssl::stream<asio::ip::tcp::socket> tls(std::move(socket), ctx_);
      tls.handshake(asio::ssl::stream_base::server, ec);
      if (ec) {
        continue;  // the client refused the certificate
      }
      ++handshakes_;
      std::string pending;
      char buf[4096];
      while (true) {
        const auto end = pending.find("\r\n\r\n");
        if (end == std::string::npos) {
          const std::size_t n = tls.read_some(asio::buffer(buf), ec);
          if (ec) {
            break;
          }
          pending.append(buf, n);
          continue;
        }
        const std::string head = pending.substr(0, end);
        pending.erase(0, end + 4);
        asio::write(tls, asio::buffer(answer_(head)), ec);
        if (ec) {
          break;
        }
      }
    }
  }

  Answer answer_;
  boost::asio::io_context ioc_;
  boost::asio::ssl::context ctx_{boost::asio::ssl::context::tls_server};
  boost::asio::ip::tcp::acceptor acceptor_;
  uint16_t port_ = 0;
  std::atomic<int> handshakes_{0};
  std::thread thread_;
};

}  // namespace llmd::http::testing
