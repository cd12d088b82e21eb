#pragma once
// Maps (method, path) to a handler. Literal segments win over `{param}` segments, so
// `/model/download/info` is never captured by `/model/{name}/info`. Unknown path -> 404
// {"detail":"Not Found"}; known path, other method -> 405 {"detail":"Method Not Allowed"}.
// Immutable after construction is finished; route() is safe from many threads.
#include <functional>
#include <string>
#include <vector>

#include "common/http/message.h"

namespace llmd::http {

using Handler = std::function<Response(Request&)>;

class Router {
 public:
  void add(std::string method, std::string pattern, Handler handler);
  Response route(Request& request) const;

 private:
  struct Route {
    std::string method;
    std::vector<std::string> segments;  // "{name}" marks a parameter
    int literal_count = 0;
    Handler handler;
  };
  std::vector<Route> routes_;
};

}  // namespace llmd::http
