#include "epp/scheduler/pipeline.h"

#include <sstream>

namespace llmd::epp {

const Profile* Pipeline::profile(std::string_view name) const {
  for (const auto& p : profiles) {
    if (p.name() == name) {
      return &p;
    }
  }
  return nullptr;
}

PluginPtr Pipeline::plugin(std::string_view name) const {
  for (const auto& p : plugins) {
    if (p->name() == name) {
      return p;
    }
  }
  return nullptr;
}

std::string Pipeline::describe() const {
  std::ostringstream os;
  auto item = [&os](const Plugin& p) { os << " " << p.name() << " (" << p.type() << ")"; };
  os << "producers:";
  for (const auto& s : producers) item(*s.plugin);
  os << "\nadmitters:";
  for (const auto& s : admitters) item(*s.plugin);
  for (const auto& p : profiles) {
    os << "\nprofile " << p.name() << ": filters:";
    for (const auto& s : p.filters()) item(*s.plugin);
    os << "; scorers:";
    for (const auto& s : p.scorers()) {
      item(*s.plugin);
      os << " x" << s.weight;
    }
    os << "; picker:";
    item(*p.picker().plugin);
  }
  return os.str();
}

}  // namespace llmd::epp
