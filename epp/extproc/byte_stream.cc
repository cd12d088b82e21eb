#include "epp/extproc/byte_stream.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <cstring>
#include <filesystem>
#include <mutex>
#include <stdexcept>

#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <spdlog/spdlog.h>

namespace llmd::epp::extproc {

namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
using tcp = net::ip::tcp;
using error_code = boost::system::error_code;

namespace {

class PlainStream final : public ByteStream {
 public:
  explicit PlainStream(tcp::socket socket) : socket_(std::move(socket)) {}
  void read_some(net::mutable_buffer buffer, Handler done) override {
    socket_.async_read_some(buffer, std::move(done));
  }
  void write(net::const_buffer buffer, Handler done) override {
    net::async_write(socket_, buffer, std::move(done));
  }
  void close() override {
    error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
  }

 private:
  tcp::socket socket_;
};

class TlsStream final : public ByteStream {
 public:
  TlsStream(tcp::socket socket, std::shared_ptr<ssl::context> context)
      : context_(std::move(context)), stream_(std::move(socket), *context_) {}
  void read_some(net::mutable_buffer buffer, Handler done) override {
    stream_.async_read_some(buffer, std::move(done));
  }
  void write(net::const_buffer buffer, Handler done) override {
    net::async_write(stream_, buffer, std::move(done));
  }
  void close() override {
    // No close_notify exchange: the peer may be gone, and a drain closes after GOAWAY anyway.
    error_code ignored;
    stream_.lowest_layer().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.lowest_layer().close(ignored);
  }
  ssl::stream<tcp::socket>& stream() { return stream_; }

 private:
  std::shared_ptr<ssl::context> context_;  // outlives the stream's SSL object
  ssl::stream<tcp::socket> stream_;
};

// ALPN: the server picks h2 or refuses the handshake (gRPC runs over h2 only).
int select_h2(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in,
              unsigned int inlen, void*) {
  for (unsigned int i = 0; i < inlen;) {
    const unsigned int len = in[i];
    if (i + 1 + len <= inlen && len == 2 && std::memcmp(in + i + 1, "h2", 2) == 0) {
      *out = in + i + 1;
      *outlen = 2;
      return SSL_TLSEXT_ERR_OK;
    }
    i += 1 + len;
  }
  return SSL_TLSEXT_ERR_ALERT_FATAL;
}

// A P-256 key and a certificate for it, valid for ten years, CN "epp" (the self-signed pair
// upstream makes when no --cert-path is given; clients such as Envoy skip verification then).
void use_self_signed(ssl::context& ctx) {
  EVP_PKEY* key = EVP_EC_gen("P-256");
  X509* cert = X509_new();
  if (key == nullptr || cert == nullptr) {
    throw std::runtime_error("--secure-serving: cannot make a self-signed key");
  }
  ASN1_INTEGER_set(X509_get_serialNumber(cert), 1);
  X509_gmtime_adj(X509_getm_notBefore(cert), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert), 10L * 365 * 24 * 3600);
  X509_set_pubkey(cert, key);
  X509_NAME* name = X509_get_subject_name(cert);
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("llm-d EPP"), -1, -1, 0);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("epp"), -1, -1, 0);
  X509_set_issuer_name(cert, name);
  const bool ok = X509_sign(cert, key, EVP_sha256()) > 0 &&
                  SSL_CTX_use_certificate(ctx.native_handle(), cert) == 1 &&
                  SSL_CTX_use_PrivateKey(ctx.native_handle(), key) == 1;
  X509_free(cert);
  EVP_PKEY_free(key);
  if (!ok) {
    throw std::runtime_error("--secure-serving: cannot make a self-signed certificate");
  }
}

}  // namespace

std::unique_ptr<ByteStream> plain_stream(tcp::socket socket) {
  return std::make_unique<PlainStream>(std::move(socket));
}

void accept_tls(tcp::socket socket, std::shared_ptr<ssl::context> context,
                std::chrono::milliseconds timeout,
                std::function<void(std::unique_ptr<ByteStream>, std::string why)> done) {
  auto executor = socket.get_executor();
  auto tls = std::make_shared<std::unique_ptr<TlsStream>>(
      std::make_unique<TlsStream>(std::move(socket), std::move(context)));
  auto timer = std::make_shared<net::steady_timer>(executor, timeout);
  timer->async_wait([tls](const error_code& ec) {
    if (!ec && *tls) {
      (*tls)->close();  // the handshake below ends with an error
    }
  });
  TlsStream& stream = **tls;
  stream.stream().async_handshake(
      ssl::stream_base::server, [tls, timer, done = std::move(done)](const error_code& ec) mutable {
        timer->cancel();
        if (ec) {
          done(nullptr, "TLS handshake failed: " + ec.message());
          return;
        }
        const unsigned char* alpn = nullptr;
        unsigned int len = 0;
        SSL_get0_alpn_selected((*tls)->stream().native_handle(), &alpn, &len);
        if (len != 2 || std::memcmp(alpn, "h2", 2) != 0) {
          (*tls)->close();
          done(nullptr, "TLS client did not offer h2 by ALPN");
          return;
        }
        done(std::move(*tls), "");
      });
}

std::shared_ptr<ssl::context> server_tls_context(const std::string& cert_dir,
                                                 const std::string& min_version) {
  auto ctx = std::make_shared<ssl::context>(ssl::context::tls_server);
  SSL_CTX_set_min_proto_version(ctx->native_handle(),
                                min_version == "VersionTLS13" ? TLS1_3_VERSION : TLS1_2_VERSION);
  ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                   ssl::context::no_sslv3);
  SSL_CTX_set_alpn_select_cb(ctx->native_handle(), &select_h2, nullptr);
  if (cert_dir.empty()) {
    use_self_signed(*ctx);
    return ctx;
  }
  const std::string crt = cert_dir + "/tls.crt", key = cert_dir + "/tls.key";
  error_code ec;
  ctx->use_certificate_chain_file(crt, ec);
  if (ec) {
    throw std::runtime_error("--cert-path: cannot load " + crt + ": " + ec.message());
  }
  ctx->use_private_key_file(key, ssl::context::pem, ec);
  if (ec) {
    throw std::runtime_error("--cert-path: cannot load " + key + ": " + ec.message());
  }
  return ctx;
}

std::function<std::shared_ptr<ssl::context>()> tls_context_source(const std::string& cert_dir,
                                                                  const std::string& min_version,
                                                                  bool reload) {
  struct State {
    std::mutex mu;
    std::shared_ptr<ssl::context> context;               // guarded by mu
    std::filesystem::file_time_type crt_time, key_time;  // guarded by mu
    std::chrono::steady_clock::time_point next_check;    // guarded by mu
  };
  auto state = std::make_shared<State>();
  state->context = server_tls_context(cert_dir, min_version);
  if (!reload || cert_dir.empty()) {
    return [context = state->context] { return context; };
  }
  auto times = [cert_dir](std::filesystem::file_time_type& crt,
                          std::filesystem::file_time_type& key) {
    std::error_code ec;
    crt = std::filesystem::last_write_time(cert_dir + "/tls.crt", ec);
    key = std::filesystem::last_write_time(cert_dir + "/tls.key", ec);
  };
  times(state->crt_time, state->key_time);
  return [state, times, cert_dir, min_version] {
    std::lock_guard lock(state->mu);
    const auto now = std::chrono::steady_clock::now();
    if (now < state->next_check) {
      return state->context;
    }
    state->next_check = now + std::chrono::seconds(1);
    std::filesystem::file_time_type crt, key;
    times(crt, key);
    if (crt == state->crt_time && key == state->key_time) {
      return state->context;
    }
    try {
      state->context = server_tls_context(cert_dir, min_version);
      state->crt_time = crt;
      state->key_time = key;
      spdlog::info("--enable-cert-reload: loaded the new pair in {}", cert_dir);
    } catch (const std::exception& e) {
      spdlog::warn("--enable-cert-reload: {}; keeping the previous pair", e.what());
    }
    return state->context;
  };
}

}  // namespace llmd::epp::extproc
