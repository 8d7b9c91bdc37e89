#include "base/error.h"

#include <cstring>

namespace mt::detail {

[[noreturn]] void throw_error(const char* file, int line, const std::string& message) {
  const char* base = std::strrchr(file, '/');
  std::ostringstream out;
  out << message << " [" << (base ? base + 1 : file) << ":" << line << "]";
  throw Error(out.str());
}

}  // namespace mt::detail
