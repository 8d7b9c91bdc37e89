// Owns the reading of Megatron's --pipeline-model-parallel-layout string
// (megatron/core/transformer/pipeline_parallel_layer_layout.py): virtual stages separated by '|',
// each a run of layer letters (E embedding, t transformer layer, m multi-token prediction layer,
// L loss), with "x*N" repeating one letter or '|' and "(...)*N" repeating a group; commas are
// cosmetic. "Et*3|(tt|)*2L" is the stages "Ettt", "tt", "tt", "L".
#pragma once

#include <string>
#include <vector>

namespace mt {

// The virtual stages, in order, each as its letters. Throws mt::Error naming the string and what
// is wrong (an unknown letter, an unclosed group, a repeat without a count).
std::vector<std::string> parse_pipeline_layout(const std::string& layout);

}  // namespace mt
