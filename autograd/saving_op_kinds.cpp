#include "autograd/saving_op_kinds.h"

#include <mutex>
#include <set>

namespace packrat {

namespace {
struct Registry {
  std::mutex mutex;
  std::set<std::string, std::less<>> kinds;
};
Registry& registry() {  // built on first use: registrations run during static initialisation
  static Registry r;
  return r;
}
}  // namespace

bool register_saving_op_kinds(std::initializer_list<std::string_view> kinds) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  for (std::string_view k : kinds) r.kinds.emplace(k);
  return true;
}

std::vector<std::string> registered_saving_op_kinds() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  return {r.kinds.begin(), r.kinds.end()};
}

}  // namespace packrat
