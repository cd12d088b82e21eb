#include "bench/epp_overhead/tcp_byte_meter.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include <gtest/gtest.h>

namespace llmd::bench {
namespace {

// A loopback listener and one connection to it, each end a plain blocking socket (closed with
// the object).
struct Connection {
  int listener = -1, client = -1, server = -1;
  uint16_t port = 0;
  Connection() {
    listener = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    EXPECT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&a), len), 0);
    EXPECT_EQ(::listen(listener, 1), 0);
    EXPECT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len), 0);
    port = ntohs(a.sin_port);
    client = ::socket(AF_INET, SOCK_STREAM, 0);
    EXPECT_EQ(::connect(client, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    server = ::accept(listener, nullptr, nullptr);
  }
  ~Connection() {
    for (int fd : {client, server, listener}) {
      if (fd >= 0) {
        ::close(fd);
      }
    }
  }
  // Writes n bytes on one end and reads them all on the other, so both ends' counters hold them.
  static void pass(int from, int to, std::size_t n) {
    const std::string data(n, 'x');
    ASSERT_EQ(::send(from, data.data(), n, 0), static_cast<ssize_t>(n));
    std::string got(n, '\0');
    std::size_t read = 0;
    while (read < n) {
      const ssize_t r = ::recv(to, got.data() + read, n - read, 0);
      ASSERT_GT(r, 0);
      read += static_cast<std::size_t>(r);
    }
  }
};

TEST(TcpByteMeter, CountsWhatTheListedPortsConnectionsExchangedBetweenSamples) {
  Connection other, first, second;
  Connection::pass(first.client, first.server, 100);  // before the first sample: not counted
  TcpByteMeter meter({first.port, second.port});
  meter.sample();
  Connection::pass(first.client, first.server, 1000);
  Connection::pass(first.server, first.client, 10);
  Connection::pass(second.client, second.server, 7);
  Connection::pass(other.client, other.server, 5000);  // another port: not counted
  meter.sample();
  // From the listening side: received is what the clients sent.
  EXPECT_EQ(meter.received(), 1007);
  EXPECT_EQ(meter.sent(), 10);
}

TEST(TcpByteMeter, AConnectionThatClosesKeepsWhatItsLastSampleSaw) {
  TcpByteMeter meter({});
  Connection c;
  TcpByteMeter live({c.port});
  live.sample();
  Connection::pass(c.client, c.server, 300);
  live.sample();
  ::close(c.client);
  ::close(c.server);
  c.client = c.server = -1;
  live.sample();
  EXPECT_EQ(live.received(), 300);
  meter.sample();  // no ports: nothing to read, nothing counted
  EXPECT_EQ(meter.received(), 0);
}

}  // namespace
}  // namespace llmd::bench
