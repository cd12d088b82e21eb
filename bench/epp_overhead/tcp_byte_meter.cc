#include "bench/epp_overhead/tcp_byte_meter.h"

#include <arpa/inet.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace llmd::bench {
namespace {

constexpr uint32_t kEstablished = 1;  // TCP_ESTABLISHED in the kernel's state numbering

std::string endpoint(int family, const uint32_t* addr, uint16_t port_be) {
  char text[INET6_ADDRSTRLEN] = {};
  ::inet_ntop(family, addr, text, sizeof(text));
  return std::string(text) + ":" + std::to_string(ntohs(port_be));
}

// inet_diag bytecode for "the local port is one of `ports`". The kernel runs it by jumping
// `yes` bytes when an op holds and `no` bytes when not, and accepts when it lands exactly on the
// end. It also requires every `no` target to be reachable by `yes` jumps from the start, so an
// "or" is laid out as `ss` does: per port a test (yes: on to its jump; no: past it to the next
// test) and an unconditional jump to the end (JMP always takes `no`); the last test's failure
// lands past the end (reject).
std::vector<inet_diag_bc_op> local_port_filter(const std::vector<uint16_t>& ports) {
  constexpr uint16_t kOp = sizeof(inet_diag_bc_op), kTest = 2 * kOp;
  std::vector<inet_diag_bc_op> program;
  const auto length = static_cast<uint16_t>(ports.size() * (kTest + kOp) - kOp);
  for (std::size_t i = 0; i < ports.size(); ++i) {
    program.push_back({INET_DIAG_BC_S_EQ, kTest, kTest + kOp});
    program.push_back({0, 0, ports[i]});
    if (i + 1 < ports.size()) {
      const auto at = static_cast<uint16_t>(program.size() * kOp);
      program.push_back({INET_DIAG_BC_JMP, kOp, static_cast<uint16_t>(length - at)});
    }
  }
  return program;
}

}  // namespace

TcpByteMeter::TcpByteMeter(std::vector<uint16_t> ports) : ports_(std::move(ports)) {
  // The filter's program length must fit its 16-bit jumps: 12 bytes per port.
  if (ports_.size() > 1000) {
    throw std::invalid_argument("TcpByteMeter: at most 1,000 ports");
  }
}

void TcpByteMeter::sample() {
  if (ports_.empty()) {
    return;
  }
  std::map<std::string, Counts> now;
  if (!dump(AF_INET, now) || !dump(AF_INET6, now)) {
    return;
  }
  for (const auto& [connection, c] : now) {
    if (!started_) {
      first_[connection] = c;
    }
    last_[connection] = c;
  }
  started_ = true;
}

bool TcpByteMeter::dump(int family, std::map<std::string, Counts>& into) const {
  const int fd = ::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (fd < 0) {
    return false;
  }
  // The kernel fills tcp_info only for sockets the filter passes: without it a dump of every
  // established socket on a loaded host took 1-3 ms of a core.
  const std::vector<inet_diag_bc_op> filter = local_port_filter(ports_);
  const auto filter_bytes = static_cast<uint32_t>(filter.size() * sizeof(inet_diag_bc_op));
  struct Query {
    nlmsghdr header;
    inet_diag_req_v2 request;
    rtattr filter;
  } query{};
  query.header.nlmsg_len = static_cast<uint32_t>(sizeof(Query)) + filter_bytes;
  query.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  query.header.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  query.request.sdiag_family = static_cast<uint8_t>(family);
  query.request.sdiag_protocol = IPPROTO_TCP;
  query.request.idiag_states = 1u << kEstablished;
  query.request.idiag_ext = 1u << (INET_DIAG_INFO - 1);
  query.filter.rta_type = INET_DIAG_REQ_BYTECODE;
  query.filter.rta_len = static_cast<uint16_t>(RTA_LENGTH(filter_bytes));
  iovec parts[2] = {{&query, sizeof(query)},
                    {const_cast<inet_diag_bc_op*>(filter.data()), filter_bytes}};
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  msghdr message{};
  message.msg_name = &kernel;
  message.msg_namelen = sizeof(kernel);
  message.msg_iov = parts;
  message.msg_iovlen = 2;
  if (::sendmsg(fd, &message, 0) < 0) {
    ::close(fd);
    return false;
  }
  std::vector<char> buffer(64 * 1024);
  bool done = false, ok = true;
  while (!done && ok) {
    const ssize_t n = ::recv(fd, buffer.data(), buffer.size(), 0);
    if (n <= 0) {
      ok = false;
      break;
    }
    int left = static_cast<int>(n);
    for (auto* h = reinterpret_cast<nlmsghdr*>(buffer.data()); NLMSG_OK(h, left);
         h = NLMSG_NEXT(h, left)) {
      if (h->nlmsg_type == NLMSG_DONE) {
        done = true;
        break;
      }
      if (h->nlmsg_type == NLMSG_ERROR) {
        ok = false;
        break;
      }
      const auto* msg = static_cast<const inet_diag_msg*>(NLMSG_DATA(h));
      const uint16_t local_port = ntohs(msg->id.idiag_sport);
      if (std::find(ports_.begin(), ports_.end(), local_port) == ports_.end()) {
        continue;
      }
      int attr_left = static_cast<int>(h->nlmsg_len - NLMSG_LENGTH(sizeof(*msg)));
      for (auto* a = reinterpret_cast<rtattr*>(const_cast<inet_diag_msg*>(msg) + 1);
           RTA_OK(a, attr_left); a = RTA_NEXT(a, attr_left)) {
        if (a->rta_type != INET_DIAG_INFO) {
          continue;
        }
        // The kernel's tcp_info may be shorter (older kernel) or longer than these headers'.
        tcp_info info{};
        std::memcpy(&info, RTA_DATA(a), std::min<std::size_t>(RTA_PAYLOAD(a), sizeof(info)));
        const std::string key =
            endpoint(msg->idiag_family, msg->id.idiag_src, msg->id.idiag_sport) + " " +
            endpoint(msg->idiag_family, msg->id.idiag_dst, msg->id.idiag_dport);
        into[key] = {static_cast<double>(info.tcpi_bytes_received),
                     static_cast<double>(info.tcpi_bytes_sent)};
      }
    }
  }
  ::close(fd);
  return ok;
}

double TcpByteMeter::total(double Counts::*field) const {
  double sum = 0;
  for (const auto& [connection, c] : last_) {
    auto it = first_.find(connection);
    sum += c.*field - (it == first_.end() ? 0.0 : it->second.*field);
  }
  return sum;
}

}  // namespace llmd::bench
