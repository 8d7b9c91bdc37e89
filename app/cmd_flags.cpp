// `megatron flags`: every flag of Megatron-LM's training parser and what megatron.cpp does with it.
#include <cstdio>

#include "app/commands.h"
#include "app/megatron_flags.h"
#include "app/options.h"
#include "base/error.h"

namespace mt {

int cmd_flags(const std::vector<std::string>& args) {
  bool markdown = false;
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h") {
      std::puts("usage: megatron flags [--markdown]\n\nEvery flag of Megatron-LM's training parser: implemented, accepted "
                "without effect (and why), or not implemented (the feature).");
      return 0;
    }
    MT_CHECK(a == "--markdown") << "unknown option " << a << " for 'megatron flags' (it takes only --markdown)";
    markdown = true;
  }
  std::fputs(megatron_flags_report(markdown, implemented_for_train).c_str(), stdout);
  return 0;
}

}  // namespace mt
