#include "base/error.h"

#include <cstring>

namespace mt::detail {

[[noreturn]] void throw_error(const char* file, int line, const char* condition, const std::string& message) {
  const char* base = std::strrchr(file, '/');
  std::ostringstream where;
  where << (base ? base + 1 : file) << ":" << line;
  if (condition) where << " (check: " << condition << ")";
  // A check without a message still says what failed.
  throw Error(message.empty() ? std::string("internal check failed: ") + (condition ? condition : "?") : message,
              where.str());
}

}  // namespace mt::detail
