// EPP executable: options -> EppApp (pod registry + scraper + scheduling pipeline + predictor
// client + training feedback -> streaming proxy on :8080, ext_proc gRPC in gateway mode, health
// on :9003, metrics on :9090) -> run until SIGINT/SIGTERM -> drain -> exit 0.
// What each component does and which thread owns it: epp/app/epp_app.h.
#include <signal.h>

#include <iostream>

#include <spdlog/spdlog.h>

#include "common/config/logging.h"
#include "common/util/memory.h"
#include "epp/app/epp_app.h"
#include "epp/app/epp_options.h"

namespace {

sigset_t shutdown_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

int run(int argc, char** argv) {
  const auto options = llmd::epp::parse_epp_options(argc, argv);
  if (!options) {
    return 0;  // --help or --version
  }
  llmd::config::init_logging(options->log_level, "epp", options->upstream.log_format);
  llmd::epp::EppApp app(*options);
  app.start();
  const sigset_t signals = shutdown_signals();
  int sig = 0;
  sigwait(&signals, &sig);
  spdlog::info("signal {}: draining for up to {} s", sig,
               static_cast<double>(options->drain_timeout.count()) / 1000.0);
  app.drain();
  app.stop();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Signals are taken synchronously by sigwait in run(); blocked before any thread starts, so
  // every thread inherits the mask and none is interrupted by them.
  const sigset_t signals = shutdown_signals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  llmd::util::return_large_blocks_to_the_system();
  llmd::util::serve_small_blocks_without_fastbins();
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "epp: " << e.what() << std::endl;
    return 2;
  }
}
