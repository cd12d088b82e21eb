#pragma once
// HTTP surface of the trainer (predictor-api.md section 3): request -> TrainerService call ->
// response. No sockets here; the router is testable on plain Request values.
#include <cstddef>

#include "common/http/router.h"

namespace prometheus {
class Registry;
}

namespace llmd::trainer {

class TrainerService;

struct RouteLimits {
  std::size_t max_bulk_entries = 100000;
  // Non-empty: the mutating endpoints (/add_training_data_bulk, /flush, /model/export) need
  // "Authorization: Bearer <admin_token>".
  std::string admin_token;
};

http::Router make_router(TrainerService& service, prometheus::Registry& registry,
                         RouteLimits limits);

}  // namespace llmd::trainer
