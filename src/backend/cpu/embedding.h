// CPU kernels for ops/embedding.h (shapes already validated by the op; ids are checked here,
// since only the kernel can read them).
#pragma once

#include "tensor/tensor.h"

namespace mt::cpu {

void embedding_fwd(const TensorView& out, const TensorView& tokens, const TensorView& positions,
                   const TensorView& word, const TensorView& pos_table);
void embedding_bwd(const TensorView& dword, const TensorView& dpos_table, const TensorView& dout,
                   const TensorView& tokens, const TensorView& positions);

}  // namespace mt::cpu
