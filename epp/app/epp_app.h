#pragma once
// The EPP process: builds every component from EppOptions and runs them.
//
// Lifecycle: the constructor loads the config files and builds the components (throws on a bad
// config, before anything listens); start() binds the listeners and starts the background work
// (throws, e.g. on a port in use); the app then runs on its own threads until the caller
// (main, on SIGTERM) calls drain(), which takes readiness down, hands a held Lease over and lets
// the requests in flight finish for up to --drain-timeout; stop() ends the rest. The destructor
// stops whatever was started, also after a failed start().
//
// Threads, and what each owns:
//  - the caller: construction, start(), drain(), stop();
//  - the timer thread runs the app's io_context and owns its periodic work: the router queue's
//    5-ms tick, the gRPC readiness sync every 100 ms (gateway mode), and the config reload check
//    every second, which is where a new config generation is swapped in;
//  - the proxy thread runs ProxyServer::run (its --io-threads I/O threads), whose workers also
//    serve ext_proc; the health port (gRPC health and HTTP probes) has a worker of its own
//    ("epp-health"), and one thread runs the metrics server (/metrics collects the scrape-time
//    gauges there);
//  - the components keep their own threads: scraper, feedback, discovery, leader elector,
//    predictor client.
#include <memory>

#include "epp/app/epp_options.h"

namespace llmd::epp {

class EppApp {
 public:
  explicit EppApp(const EppOptions& options);
  ~EppApp();
  EppApp(const EppApp&) = delete;
  EppApp& operator=(const EppApp&) = delete;

  void start();
  // Blocking; at most --drain-timeout (plus the Lease hand-over).
  void drain();
  void stop();  // idempotent

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace llmd::epp
