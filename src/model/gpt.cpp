#include "model/gpt.h"

namespace mt {

namespace {
StageOptions stage_options(const GptModelOptions& o) {
  StageOptions s;
  s.slots = 1;
  s.threads = o.threads;
  s.head_chunk_tokens = o.head_chunk_tokens;
  s.tp_comm = o.tp_comm;
  s.ddp = o.ddp;
  return s;
}
}  // namespace

GptModel::GptModel(const ModelConfig& config, int64_t micro_batch, Backend& backend, MemoryTracker* tracker,
                   const GptModelOptions& options)
    : stage_(config, StageRange::whole(config), micro_batch, backend, tracker, stage_options(options)) {}

}  // namespace mt
