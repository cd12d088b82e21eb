#pragma once
// HTTP surface of the predictor (predictor-api.md section 4). Transport-free.
#include <cstddef>
#include <string>

#include <functional>

#include "common/http/response_stream.h"
#include "common/http/router.h"

namespace prometheus {
class Registry;
}

namespace llmd::predictor {

class ModelStore;
class ModelSync;

struct PredictorInfo {
  std::string objective_type = "quantile";
  double quantile = 0.9;
  double sync_interval_sec = 10;
  std::string training_server_url;
  std::size_t max_bulk_rows = 10000;
  std::string admin_token;  // non-empty: POST /reload needs "Authorization: Bearer <token>"
};

struct PredictorHttp {
  http::Router router;  // every route but the answer to POST /reload
  // The server's handler: POST /reload asks the sync thread to fetch now and answers when it
  // has (no I/O thread waits for the trainer); everything else is the router's, at once.
  std::function<void(http::Request&&, http::ResponseStreamPtr)> handler;
};

PredictorHttp make_predictor_http(ModelStore& store, ModelSync& sync, const PredictorInfo& info,
                                  prometheus::Registry& registry);

}  // namespace llmd::predictor
