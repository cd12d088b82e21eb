#pragma once
// Fans one dispatch's events out to several sinks (training feedback, metrics, the scheduling
// port) in the order they were added. Built at start-up, then read-only: called on the
// request's thread like every CompletionSink.
#include <string>
#include <vector>

#include "epp/request/completed_request.h"

namespace llmd::epp {

class CompletionFanout : public CompletionSink {
 public:
  void add(CompletionSink& sink) { sinks_.push_back(&sink); }
  void on_dispatched(const CompletedRequest& req) override {
    for (auto* s : sinks_) {
      s->on_dispatched(req);
    }
  }
  void on_first_token(const CompletedRequest& req) override {
    for (auto* s : sinks_) {
      s->on_first_token(req);
    }
  }
  void on_completed(const CompletedRequest& done) override {
    for (auto* s : sinks_) {
      s->on_completed(done);
    }
  }
  void on_rejected(const std::string& model, int status) override {
    for (auto* s : sinks_) {
      s->on_rejected(model, status);
    }
  }

 private:
  std::vector<CompletionSink*> sinks_;
};

}  // namespace llmd::epp
