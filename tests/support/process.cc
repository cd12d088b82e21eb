#include "tests/support/process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "common/http/client.h"

namespace llmd::testing {

// Ports come from [10000, 20000), below the kernel's ephemeral range (32768+): a port picked
// from the ephemeral range can be taken, between the pick and the server's bind, by any
// outgoing connection of the parallel tests (CI saw "Address already in use" that way).
// free_port_block() (stack_fixture.h) uses [20000, 30000), so the two never overlap.
bool loopback_port_free(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

// A port handed out is reserved until this process exits: in the process by a set (three
// free_port() calls before any server binds could otherwise return the same port twice) and
// across the parallel test processes by an flock()ed file that the kernel releases when the
// process dies, however it dies. CI saw "Address already in use" from both races.
bool claim_loopback_port(uint16_t port) {
  static std::mutex mu;
  static std::set<uint16_t> claimed;
  std::lock_guard<std::mutex> lock(mu);
  if (claimed.count(port) != 0 || !loopback_port_free(port)) {
    return false;
  }
  const std::string dir = "/tmp/llmd-test-ports";
  ::mkdir(dir.c_str(), 0777);
  const std::string path = dir + "/" + std::to_string(port);
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd >= 0 && ::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);
    return false;  // another test process holds it
  }
  // fd < 0 (an unwritable /tmp): the in-process set still holds; the fd stays open on purpose.
  claimed.insert(port);
  return true;
}

uint16_t free_port() {
  thread_local std::mt19937 rng{std::random_device{}()};
  for (int attempt = 0; attempt < 500; ++attempt) {
    auto port = static_cast<uint16_t>(10000 + rng() % 10000);
    if (claim_loopback_port(port)) {
      return port;
    }
  }
  throw std::runtime_error("free_port: no free port in [10000, 20000)");
}

uint16_t free_port_block(int n) {
  thread_local std::mt19937 rng{std::random_device{}()};
  for (int attempt = 0; attempt < 200; ++attempt) {
    const auto base = static_cast<uint16_t>(20000 + rng() % 10000);
    bool ok = true;
    for (int i = 0; i < n && ok; ++i) {
      ok = loopback_port_free(static_cast<uint16_t>(base + i));
    }
    for (int i = 0; i < n && ok; ++i) {  // claimed only when all were free: no half blocks held
      ok = claim_loopback_port(static_cast<uint16_t>(base + i));
    }
    if (ok) {
      return base;
    }
  }
  throw std::runtime_error("free_port_block: no run of free ports in [20000, 30000)");
}

std::string binary(const std::string& relative) {
  return std::string(LLMD_BINARY_DIR) + "/" + relative;
}

TempDir::TempDir() {
  std::string tmpl = "/tmp/llmd-test-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) {
    throw std::runtime_error("mkdtemp failed");
  }
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

Process::Process(std::string exe, std::vector<std::string> args, std::vector<std::string> env,
                 int max_open_files, int64_t max_file_bytes) {
  static int counter = 0;
  log_path_ =
      "/tmp/llmd-proc-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + ".log";
  pid_ = ::fork();
  if (pid_ == 0) {
    int fd = ::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    for (const auto& e : env) {
      ::putenv(const_cast<char*>(e.c_str()));
    }
    if (max_open_files > 0) {
      rlimit lim{static_cast<rlim_t>(max_open_files), static_cast<rlim_t>(max_open_files)};
      ::setrlimit(RLIMIT_NOFILE, &lim);
    }
    if (max_file_bytes > 0) {
      ::signal(SIGXFSZ, SIG_IGN);  // an ignored signal stays ignored across execv
      rlimit lim{static_cast<rlim_t>(max_file_bytes), static_cast<rlim_t>(max_file_bytes)};
      ::setrlimit(RLIMIT_FSIZE, &lim);
    }
    std::vector<char*> argv;
    argv.push_back(exe.data());
    for (auto& a : args) {
      argv.push_back(a.data());
    }
    argv.push_back(nullptr);
    ::execv(exe.c_str(), argv.data());
    std::_Exit(127);
  }
}

Process::~Process() {
  if (pid_ > 0 && running()) {
    terminate(std::chrono::seconds(10));
  }
  std::error_code ec;
  std::filesystem::remove(log_path_, ec);
}

bool Process::running() {
  if (pid_ <= 0) {
    return false;
  }
  int status = 0;
  pid_t r = ::waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    pid_ = -1;
    return false;
  }
  return true;
}

bool Process::wait_http_ok(uint16_t port, const std::string& path,
                           std::chrono::milliseconds timeout, const std::string& host) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  http::HttpClient client(host, port, std::chrono::milliseconds(500));
  while (std::chrono::steady_clock::now() < deadline) {
    if (!running()) {
      return false;
    }
    if (client.get(path).status == 200) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

int Process::terminate(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) {
    return -1;
  }
  ::kill(pid_, SIGTERM);
  return wait_exit(timeout);
}

int Process::wait_exit(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) {
    return -1;
  }
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill_now();
  return -1;
}

void Process::kill_now() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }
}

std::string Process::log() const {
  std::ifstream in(log_path_);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

double proc_status_mib(const std::string& proc, const std::string& field) {
  std::ifstream in("/proc/" + proc + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) {
      std::istringstream ss(line.substr(field.size() + 1));
      double kb = 0;
      ss >> kb;
      return kb / 1024.0;
    }
  }
  return -1;
}

}  // namespace llmd::testing
