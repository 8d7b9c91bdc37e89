// Owns the pipeline partition: which global transformer layers each (pipeline rank, model chunk)
// builds, and where the embedding and the head + loss live, under Megatron's flags
// (get_num_layers_to_build in megatron/core/transformer/transformer_block.py,
// get_transformer_layer_offset in transformer_layer.py, the checks in transformer_config.py and
// megatron/training/arguments.py).
//
// The model is cut into pp·v virtual stages; rank r's chunk c is virtual stage c·pp + r, and the
// layers are dealt to virtual stages in that order, each taking a contiguous range. Every layout
// accepted here tiles [0, num_layers) exactly; every other one is refused with one message that
// names the numbers and a layout that would work (Megatron, by contrast, can drop layers).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mt {

// The virtual stage that rank `rank`'s model chunk `chunk` computes.
inline int virtual_stage(int pp, int rank, int chunk) { return chunk * pp + rank; }

// Megatron's partition flags. Unset optionals are unset flags.
struct PartitionConfig {
  int pp = 1;              // --pipeline-model-parallel-size
  int64_t num_layers = 1;  // --num-layers
  // Uneven split: the first (last) rank's layer count, split evenly over its chunks; the other
  // ranks share the rest evenly. Both must be > 0.
  std::optional<int64_t> first_stage_layers;  // --decoder-first-pipeline-num-layers
  std::optional<int64_t> last_stage_layers;   // --decoder-last-pipeline-num-layers
  // The embedding (loss) takes the place of one layer in the even split: num_layers + 1 (+ 1)
  // places are split evenly and the first (last) virtual stage builds one layer fewer, possibly
  // none. Not with the uneven split.
  bool account_for_embedding = false;  // --account-for-embedding-in-pipeline-split
  bool account_for_loss = false;       // --account-for-loss-in-pipeline-split
  // Interleaving, at most one of the two: v = (places per rank) / layers_per_virtual_stage (not
  // with the uneven split), or v given directly. v == 1 means no interleaving.
  std::optional<int64_t> layers_per_virtual_stage;  // --num-layers-per-virtual-pipeline-stage
  std::optional<int> virtual_stages_per_rank;       // --num-virtual-stages-per-pipeline-rank
  // Every virtual stage's layers spelled out (pipeline/layout_string.h): pp·v stages, v given by
  // their number. Excludes every flag above but pp and num_layers.
  std::optional<std::string> layout;  // --pipeline-model-parallel-layout
};

// What one virtual stage builds: layers [first_layer, last_layer) (as model/config.h's StageRange),
// plus the embedding on virtual stage 0 and the final norm, output layer and loss on the last.
struct ChunkLayers {
  int64_t first_layer = 0;
  int64_t last_layer = 0;  // one past the last
  bool embedding = false;
  bool head = false;

  int64_t num_layers() const { return last_layer - first_layer; }
  bool operator==(const ChunkLayers&) const = default;
};

struct PipelinePartition {
  int pp = 1;
  int vp = 1;                       // model chunks (virtual stages) per rank
  std::vector<ChunkLayers> stages;  // indexed by virtual stage, pp·vp of them

  const ChunkLayers& chunk(int rank, int chunk) const { return stages.at(virtual_stage(pp, rank, chunk)); }
};

// The number of model chunks per rank the flags ask for (1: no interleaving). Throws mt::Error on
// the flag combinations Megatron refuses (both interleaving flags, a split that does not divide).
int virtual_pipeline_size(const PartitionConfig& config);

// The layers of every virtual stage. Throws mt::Error, naming the numbers and a split that works,
// for any layout that does not divide as Megatron requires.
PipelinePartition partition_layers(const PartitionConfig& config);

}  // namespace mt
