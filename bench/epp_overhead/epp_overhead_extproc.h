#pragma once
// bench/epp_overhead's gateway-mode load: plays Envoy against the EPP's ext_proc port, one
// bidirectional stream per HTTP request (FULL_DUPLEX_STREAMED, as the Gateway API Inference
// Extension configures Envoy): request headers, the whole request body, then, once the EPP has
// answered with the pick, the response headers and a one-message response body (so the EPP
// closes its in-flight bookkeeping exactly as for a served request). No upstream is contacted:
// the pod never sees these requests. gRPC stays in the .cc.
#include <cstdint>
#include <memory>
#include <string>

#include "bench/epp_overhead/epp_overhead_load.h"

namespace llmd::bench {

class ExtProcLoad {
 public:
  // `channels` HTTP/2 connections (Envoy opens about one per worker thread); streams go round
  // robin over them. Throws std::runtime_error when the port does not connect within 10 s.
  ExtProcLoad(uint16_t port, int channels);
  ~ExtProcLoad();  // waits (bounded by the stream deadline) for the streams still open
  ExtProcLoad(const ExtProcLoad&) = delete;
  ExtProcLoad& operator=(const ExtProcLoad&) = delete;

  // One exchange carrying `body` (POST /v1/completions). `done` gets ok (a destination came
  // back and the stream ended OK) and the ms from writing the request headers to the arrival
  // of the answer that carries x-gateway-destination-endpoint.
  void start(const std::string& body, LoadDone done);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace llmd::bench
