#pragma once
// uvicorn's command line, as the charts and the reference images start the sidecars
// (`uvicorn prediction_server:app --host 0.0.0.0 --port 8001 --workers 8`), mapped onto our
// executables. uvicorn's own rules are kept: flag > UVICORN_<FLAG> > default (host 127.0.0.1,
// port 8000); --workers also falls back to WEB_CONCURRENCY. Worker processes become threads of
// one server: the predictor's --workers, the trainer's --io-threads. Without any of the three
// our executable's own default (or its env) decides.
// Pure: no I/O. Anything else uvicorn accepts is refused with a UsageError naming it.
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace llmd::uvicorn {

// uvicorn exits 2 on these (click's usage errors); so does the entrypoint.
class UsageError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

struct Launch {
  bool help = false;                       // --help: print usage() and exit 0
  std::string program;                     // "predictor" or "trainer"
  std::vector<std::string> args;           // its flags
  std::vector<std::string> consumed_envs;  // UVICORN_* names mapped to flags: unset before exec
};

using Environment = std::map<std::string, std::string>;

// `args` without argv[0]. Throws UsageError.
Launch parse_command_line(const std::vector<std::string>& args, const Environment& env);

std::string usage();

}  // namespace llmd::uvicorn
