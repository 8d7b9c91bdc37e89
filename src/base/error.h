// Owns mt::Error and the MT_CHECK / MT_FAIL macros: every bad input or broken invariant
// becomes one exception carrying a message for the user (what to fix) and, apart, where it was
// raised; app/run_or_abort.cpp turns it into a clean exit.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace mt {

// what(): the message for the user. where(): the source location and, for a failed MT_CHECK, its
// condition (shown under `megatron --verbose`).
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what, std::string where = "")
      : std::runtime_error(what), where_(std::move(where)) {}
  const std::string& where() const { return where_; }

 private:
  std::string where_;
};

namespace detail {
[[noreturn]] void throw_error(const char* file, int line, const char* condition, const std::string& message);

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
#define MT_CHECK(cond)                                 \
  if (cond) {                                          \
  } else                                               \
    ::mt::detail::ErrorThrower(__FILE__, __LINE__, #cond) = ::mt::detail::MessageBuilder()

// MT_FAIL() << "message";  always throws.
#define MT_FAIL() ::mt::detail::ErrorThrower(__FILE__, __LINE__, nullptr) = ::mt::detail::MessageBuilder()

namespace mt::detail {
// Assigning a MessageBuilder to it throws; this lets the macros accept a trailing << chain.
struct ErrorThrower {
  const char* file;
  int line;
  const char* condition;  // MT_CHECK's; null for MT_FAIL
  ErrorThrower(const char* f, int l, const char* c) : file(f), line(l), condition(c) {}
  [[noreturn]] void operator=(const MessageBuilder& message) { throw_error(file, line, condition, message.str()); }
};
}  // namespace mt::detail
