// `uvicorn` entrypoint of the sidecar images: the charts start the predictor with
// `command: ["uvicorn"]`, `args: ["prediction_server:app", "--host", "0.0.0.0", "--port", N]`.
// This maps that command line (command_line.h) and execs our executable in its place; it links
// nothing but the C++ runtime. Exit 2 on a usage error (as uvicorn), 127 when the executable
// cannot be run.
#include <unistd.h>

#include <cerrno>
#include <cstdlib>  // unsetenv
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "uvicorn/command_line.h"

extern char** environ;

namespace {

llmd::uvicorn::Environment current_environment() {
  llmd::uvicorn::Environment env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string kv(*e);
    const auto eq = kv.find('=');
    if (eq != std::string::npos) {
      env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
    }
  }
  return env;
}

// The executable next to this one (/usr/local/bin in the images), else `program` for PATH.
std::string executable(const std::string& program) {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const auto sibling = self.parent_path() / program;
    if (::access(sibling.c_str(), X_OK) == 0) {
      return sibling.string();
    }
  }
  return program;
}

}  // namespace

int main(int argc, char** argv) {
  llmd::uvicorn::Launch launch;
  try {
    launch = llmd::uvicorn::parse_command_line(std::vector<std::string>(argv + 1, argv + argc),
                                               current_environment());
  } catch (const llmd::uvicorn::UsageError& e) {
    std::cerr << "uvicorn: " << e.what() << "\nTry 'uvicorn --help' for help." << std::endl;
    return 2;
  }
  if (launch.help) {
    std::cout << llmd::uvicorn::usage();
    return 0;
  }
  for (const auto& name : launch.consumed_envs) {
    ::unsetenv(name.c_str());
  }
  const std::string exe = executable(launch.program);
  std::vector<char*> args{const_cast<char*>(exe.c_str())};
  std::string line = exe;
  for (auto& a : launch.args) {
    args.push_back(a.data());
    line += " " + a;
  }
  args.push_back(nullptr);
  std::cerr << "uvicorn: exec " << line << std::endl;
  ::execvp(exe.c_str(), args.data());
  std::cerr << "uvicorn: cannot run " << exe << ": " << std::strerror(errno) << std::endl;
  return 127;
}
