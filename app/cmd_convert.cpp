// `megatron convert`: Megatron-LM's tools/checkpoint/convert.py with its flag names. The work is
// in train/checkpoint_convert.h; this file maps flags and prints what was written.
#include <cstdio>
#include <string>
#include <vector>

#include "app/commands.h"
#include "app/options.h"
#include "base/error.h"
#include "train/checkpoint_convert.h"

namespace mt {

int cmd_convert(const std::vector<std::string>& args, Communicator* world) {
  for (const std::string& a : args)
    if (a == "--help" || a == "-h") {
      std::fputs(options_help("convert").c_str(), stdout);
      return 0;
    }
  const Options o = parse_options("convert", args);
  MT_CHECK(world == nullptr || world->size() == 1)
      << "convert runs as one process (it reads and writes every file itself); start it without mpirun";
  MT_CHECK(o.has("--loader") && o.has("--saver")) << "pass --loader {megatron,hf} and --saver {megatron,hf}";
  MT_CHECK(o.has("--load-dir") && o.has("--save-dir")) << "pass --load-dir and --save-dir";
  ConvertOptions c;
  c.loader = o.text("--loader");
  c.saver = o.text("--saver");
  c.load_dir = o.text("--load-dir");
  c.save_dir = o.text("--save-dir");
  if (o.has("--ckpt-step")) {
    MT_CHECK(c.loader == "megatron") << "--ckpt-step picks an iteration of a megatron checkpoint (--loader megatron)";
    c.ckpt_step = o.integer("--ckpt-step");
  }
  c.target_tp = static_cast<int>(o.integer("--target-tensor-parallel-size"));
  c.target_pp = static_cast<int>(o.integer("--target-pipeline-parallel-size"));
  MT_CHECK(c.saver == "megatron" || (c.target_tp == 1 && c.target_pp == 1))
      << "--target-tensor-parallel-size and --target-pipeline-parallel-size apply to --saver megatron; a Hugging "
      << "Face model has no parallel layout";
  const ConvertSummary s = convert_checkpoint(c);
  std::printf("converted %s (%s) to %s: %lld tensors, %lld parameters\n", c.load_dir.c_str(), c.loader.c_str(),
              s.description.c_str(), static_cast<long long>(s.tensors), static_cast<long long>(s.parameters));
  return 0;
}

}  // namespace mt
