// CPU kernels for ops/embedding.h (shapes already validated by the op; ids are checked here,
// since only the kernel can read them). The word table holds ids [vocab_start, vocab_start + rows)
// of a vocabulary of vocab_total ids; other ids get a zero word row and no gradient.
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace mt::cpu {

void embedding_fwd(const TensorView& out, const TensorView& tokens, const TensorView& positions,
                   const TensorView& word, const TensorView& pos_table, int64_t vocab_start, int64_t vocab_total);
void embedding_bwd(const TensorView& dword, const TensorView& dpos_table, const TensorView& dout,
                   const TensorView& tokens, const TensorView& positions, int64_t vocab_start,
                   int64_t vocab_total);

}  // namespace mt::cpu
