#pragma once
// Starts a real executable for end-to-end tests and always stops it: the destructor sends
// SIGTERM, waits (bounded) and then SIGKILLs. Output goes to a log file printed on failure.
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace llmd::testing {

// A port that was free a moment ago on 127.0.0.1.
uint16_t free_port();
// A block of `n` consecutive free ports in [20000, 30000), claimed like free_port()'s: below
// the kernel's ephemeral range and above free_port()'s range (modelsim pods take a block).
uint16_t free_port_block(int n);
// True when a TCP socket can bind 127.0.0.1:`port` right now.
bool loopback_port_free(uint16_t port);
// True when `port` is free and now reserved for this process (no other free_port() or
// free_port_block() here or in a parallel test process returns it until this process exits).
bool claim_loopback_port(uint16_t port);
// A "VmXXX:  1234 kB" field (VmRSS, VmHWM, ...) of /proc/<proc>/status in MiB, `proc` being a
// pid or "self"; -1 when unreadable.
double proc_status_mib(const std::string& proc, const std::string& field);

// Path of a built executable, e.g. binary("trainer/trainer").
std::string binary(const std::string& relative);
// A fresh empty directory under /tmp, removed by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

class Process {
 public:
  // `max_open_files` > 0 lowers the child's RLIMIT_NOFILE (descriptor exhaustion tests);
  // `max_file_bytes` > 0 its RLIMIT_FSIZE, with SIGXFSZ ignored so that a write past it fails
  // with EFBIG part-way, as one on a full disk fails with ENOSPC.
  Process(std::string exe, std::vector<std::string> args, std::vector<std::string> env = {},
          int max_open_files = 0, int64_t max_file_bytes = 0);
  ~Process();
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  // Polls GET <path> on host:port until it answers 200 or the timeout passes.
  bool wait_http_ok(uint16_t port, const std::string& path = "/healthz",
                    std::chrono::milliseconds timeout = std::chrono::seconds(20),
                    const std::string& host = "127.0.0.1");
  // SIGTERM and wait for exit (bounded); returns the exit status or -1.
  int terminate(std::chrono::milliseconds timeout = std::chrono::seconds(20));
  // Waits for the process to exit by itself; its exit status (128 + signal when killed), or -1
  // when it still runs at the timeout (it is then killed).
  int wait_exit(std::chrono::milliseconds timeout = std::chrono::seconds(20));
  void kill_now();  // SIGKILL, no cleanup (crash simulation)
  bool running();
  std::string log() const;
  pid_t pid() const { return pid_; }
  // proc_status_mib() of this process.
  double status_mib(const std::string& field) const {
    return proc_status_mib(std::to_string(pid_), field);
  }

 private:
  pid_t pid_ = -1;
  std::string log_path_;
};

}  // namespace llmd::testing
