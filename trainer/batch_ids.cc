#include "trainer/batch_ids.h"

namespace llmd::trainer {

bool BatchIdWindow::contains(std::string_view id) const {
  return known_.count(id) > 0;
}

void BatchIdWindow::add(const std::string& id) {
  if (id.empty() || capacity_ == 0 || contains(id)) {
    return;
  }
  // A deque never moves its elements on push_back/pop_front, so the views stay valid.
  order_.push_back(id);
  known_.insert(order_.back());
  while (order_.size() > capacity_) {
    known_.erase(order_.front());
    order_.pop_front();
  }
}

}  // namespace llmd::trainer
