// Owns mt::Error and the MT_CHECK / MT_FAIL macros: every bad input or broken invariant
// becomes one exception carrying file:line and a hint; app/main.cpp turns it into a clean exit.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace mt {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {
[[noreturn]] void throw_error(const char* file, int line, const std::string& message);

// Builds the message with operator<< so call sites read like a sentence.
class MessageBuilder {
 public:
  template <typename T>
  MessageBuilder& operator<<(const T& value) {
    stream_ << value;
    return *this;
  }
  std::string str() const { return stream_.str(); }

 private:
  std::ostringstream stream_;
};
}  // namespace detail

}  // namespace mt

// MT_CHECK(cond) << "what went wrong; how to fix it";  throws mt::Error when cond is false.
#define MT_CHECK(cond)                                                              \
  if (cond) {                                                                       \
  } else                                                                            \
    ::mt::detail::ErrorThrower(__FILE__, __LINE__) = ::mt::detail::MessageBuilder() \
                                                     << "check failed: " #cond ": "

// MT_FAIL() << "message";  always throws.
#define MT_FAIL() ::mt::detail::ErrorThrower(__FILE__, __LINE__) = ::mt::detail::MessageBuilder()

namespace mt::detail {
// Assigning a MessageBuilder to it throws; this lets the macros accept a trailing << chain.
struct ErrorThrower {
  const char* file;
  int line;
  ErrorThrower(const char* f, int l) : file(f), line(l) {}
  [[noreturn]] void operator=(const MessageBuilder& message) { throw_error(file, line, message.str()); }
};
}  // namespace mt::detail
