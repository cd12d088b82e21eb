#include "epp/feedback/model_labels.h"

namespace llmd::epp {

void ModelLabels::set_pool_serves(PoolServes pool_serves) {
  std::lock_guard lock(mu_);
  pool_serves_ = std::move(pool_serves);
}

std::string ModelLabels::label(const std::string& model, bool served) {
  std::lock_guard lock(mu_);
  if (names_.count(model) > 0) {
    return model;
  }
  if (model.empty() || names_.size() >= kMax) {
    return kOther;
  }
  if (served || (pool_serves_ && pool_serves_(model))) {
    names_.insert(model);
    return model;
  }
  return kOther;
}

}  // namespace llmd::epp
