// megatron: subcommand dispatch. Every mt::Error ends here as one message and exit code 1.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "app/blas_tuning.h"
#include "base/error.h"

namespace mt {
int cmd_train(const std::vector<std::string>& args);
}

namespace {
const char* kUsage =
    "usage: megatron <command> [options]\n"
    "\n"
    "commands:\n"
    "  train    train a GPT model (megatron train --help for its options)\n";
}

int main(int argc, char** argv) {
  mt::retune_openblas_or_continue(argv);
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::fputs(kUsage, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  const std::string command = args[0];
  args.erase(args.begin());
  try {
    if (command == "train") return mt::cmd_train(args);
    std::fprintf(stderr, "megatron: unknown command '%s'\n\n%s", command.c_str(), kUsage);
    return 2;
  } catch (const mt::Error& e) {
    std::fprintf(stderr, "megatron %s: error: %s\n", command.c_str(), e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "megatron %s: internal error: %s\n", command.c_str(), e.what());
    return 1;
  }
}
