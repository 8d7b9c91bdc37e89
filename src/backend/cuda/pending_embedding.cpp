// Placeholders for the embedding ops until their CUDA kernels land (issue 25): each
// names itself, so a CUDA run stops with a clear message instead of a wrong result.
#include "backend/cuda/ops.h"

namespace mt::cuda {

void embedding_fwd(const TensorView& out, const TensorView& tokens, const TensorView& positions,
                   const TensorView& word, const TensorView& pos_table, int64_t vocab_start, int64_t vocab_total) {
  MT_FAIL() << "embedding_fwd: no CUDA kernel yet (issue 25); run with --device cpu";
}

void embedding_bwd(const TensorView& dword, const TensorView& dpos_table, const TensorView& dout,
                   const TensorView& tokens, const TensorView& positions, int64_t vocab_start,
                   int64_t vocab_total) {
  MT_FAIL() << "embedding_bwd: no CUDA kernel yet (issue 25); run with --device cpu";
}

}  // namespace mt::cuda
