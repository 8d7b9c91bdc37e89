// Owns the pipeline executor: runs one rank's action list (schedule.h) over a Communicator,
// calling forward and backward on this rank's model chunks through the PipelineChunk interface
// (the pipeline knows no model types; the trainer adapts its Stages), and moving activations to
// the next virtual stage and gradients to the previous one with tagged point-to-point messages.
//
// Each Exchange action posts all its receives and sends non-blocking and waits for them together
// (Megatron's batched isend/irecv). Received tensors wait in caller-provided buffers until the
// compute that consumes them. A chunk's outputs are sent from where the chunk leaves them, with
// no copy, before the chunk computes again: the schedule sends each in the exchange right after
// its compute, so the chunk may reuse one output buffer for every micro-batch.
#pragma once

#include <vector>

#include "comm/communicator.h"
#include "pipeline/schedule.h"

namespace mt {

class PipelineChunk {
 public:
  virtual ~PipelineChunk() = default;
  // Micro-batch `mb` through this chunk. input: the previous virtual stage's output (empty on
  // virtual stage 0). Returns the output for the next virtual stage (empty on the last), which
  // must stay valid until the chunk's next forward or backward.
  virtual TensorView forward(int mb, const TensorView& input) = 0;
  // Micro-batch `mb`'s backward. output_grad: the next virtual stage's gradient of this chunk's
  // output (empty on the last virtual stage). Returns the gradient of the input (empty on virtual
  // stage 0), valid until the next backward.
  virtual TensorView backward(int mb, const TensorView& output_grad) = 0;
};

struct PipelineRun {
  Communicator* pp = nullptr;  // the pipeline group; rank() is this rank's pipeline rank
  std::vector<PipelineChunk*> chunks;  // one per model chunk (vp of them)
  // Every message is one micro-batch's hidden states: `message` elements, activations in
  // activation_dtype, gradients in f32.
  Shape message;
  DType activation_dtype = DType::f32;
  // At least max_buffered_receives(actions, pp) buffers of f32 `message` shape.
  std::vector<TensorView> receive_buffers;
};

// Runs `actions` (this rank's list of a schedule for run.pp->size() ranks and run.chunks.size()
// chunks). Throws mt::Error on a list that does not fit (a compute whose input never arrived, too
// few buffers); a peer's failure ends the job through Communicator::abort, never a hang here.
void execute_pipeline(const std::vector<Action>& actions, const PipelineRun& run);

// The message tags: activations and gradients travel separately, each FIFO per pair of ranks.
inline constexpr int kActivationTag = 0;
inline constexpr int kGradientTag = 1;

}  // namespace mt
