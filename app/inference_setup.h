// What `generate` and `serve` both start from: the checkpoint under --load (its latest step, or
// --ckpt-step) read into an inference engine for this tensor-parallel rank, and the tokenizer the
// checkpoint records (or the one the tokenizer flags name). The model is the one the checkpoint
// records; --norm-epsilon, --rotary-base and --bf16 / --fp16 on the command line replace what
// changes its function but not its tensors. The ranks of `world` form one tensor-parallel group; an
// MoE model's experts are split inside it over --expert-model-parallel-size x
// --expert-tensor-parallel-size ranks (Megatron's expert grid with one data-parallel rank).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "app/device_selection.h"
#include "app/options.h"
#include "comm/communicator.h"
#include "data/tokenizer.h"
#include "infer/engine.h"
#include "parallel/process_groups.h"

namespace mt {

class CheckpointReader;

struct InferenceSetup {
  InferenceSetup();
  ~InferenceSetup();

  // Builds the engine and reads the weights. slots: sequences held at once (reduced to what
  // --inference-dynamic-batching-buffer-size-gb allows); positions: what a sequence may hold when
  // --inference-max-seq-length is not given (0: the model's positions).
  void load_engine(const Options& o, Communicator* world, int64_t slots, int64_t positions);

  RunDevice device;  // --device: the engine's backend and its tensor-parallel communicator
  std::optional<ProcessGroups> groups;  // an MoE model's expert groups (over device.world), when it has several ranks
  std::unique_ptr<CheckpointReader> checkpoint;
  ModelConfig model;  // the checkpoint's, split over the tp group
  DType activation_dtype = DType::f32;  // the checkpoint's (--bf16 / --fp16 replace it)
  std::unique_ptr<Tokenizer> tokenizer;
  MemoryTracker memory;
  std::unique_ptr<InferenceEngine> engine;
};

// Opens the checkpoint, makes its tokenizer and picks the device (rank 0 says which on stderr); the
// engine comes with load_engine.
std::unique_ptr<InferenceSetup> open_for_inference(const Options& o, Communicator* world);

}  // namespace mt
