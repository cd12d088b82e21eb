#pragma once
// The pick the in-process ext_proc tests' scheduling ports return: pod "a" at 10.0.0.1:8000.
#include "epp/request/scheduling_port.h"

namespace llmd::testing {

inline epp::PickResult pick_of_pod_a() {
  epp::PickResult r;
  epp::PodInfo pod;
  pod.name = "a";
  pod.address = "10.0.0.1:8000";
  r.ranked.push_back(epp::Endpoint::of(std::move(pod)));
  return r;
}

}  // namespace llmd::testing
