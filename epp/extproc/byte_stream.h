#pragma once
// The bytes under an HTTP/2 connection: a plain TCP socket, or TLS over it (ext_proc with
// --secure-serving, h2 chosen by ALPN as gRPC requires). Internal to the gRPC server (Asio
// and OpenSSL stay in extproc's .cc files and this header, which only they include).
// Threads: used on the connection's worker only.
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>

namespace llmd::epp::extproc {

class ByteStream {
 public:
  using Handler = std::function<void(const boost::system::error_code&, std::size_t)>;
  virtual ~ByteStream() = default;
  virtual void read_some(boost::asio::mutable_buffer buffer, Handler done) = 0;
  // All of `buffer`, then `done`.
  virtual void write(boost::asio::const_buffer buffer, Handler done) = 0;
  virtual void close() = 0;
};

std::unique_ptr<ByteStream> plain_stream(boost::asio::ip::tcp::socket socket);

// The server side of a TLS handshake on `socket`, bounded by `timeout`; `done` gets the stream,
// or null (and the reason) when the handshake failed, timed out or chose no h2.
void accept_tls(boost::asio::ip::tcp::socket socket,
                std::shared_ptr<boost::asio::ssl::context> context,
                std::chrono::milliseconds timeout,
                std::function<void(std::unique_ptr<ByteStream>, std::string why)> done);

// A server context offering only h2: the pair in `cert_dir`/tls.crt and tls.key, or, when
// `cert_dir` is empty, a self-signed pair made now (as upstream's EPP does). `min_version`:
// "" or "VersionTLS12" (TLS 1.2), "VersionTLS13". Throws std::runtime_error naming the file.
std::shared_ptr<boost::asio::ssl::context> server_tls_context(const std::string& cert_dir,
                                                              const std::string& min_version);

// server_tls_context() now (a bad pair throws here, at start), then, for each new connection,
// the current context: with `reload`, the files are checked at most once a second and a
// changed pair is loaded (one that fails to load keeps the previous, with a warning).
// Thread-safe.
std::function<std::shared_ptr<boost::asio::ssl::context>()> tls_context_source(
    const std::string& cert_dir, const std::string& min_version, bool reload);

}  // namespace llmd::epp::extproc
