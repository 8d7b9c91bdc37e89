// CUDA entry points of ops/embedding.h: the id range checks (the CPU kernels' errors, from ids.h),
// then the kernels of embedding.cu.
#include "backend/cuda/ids.h"
#include "backend/cuda/kernels/embedding.h"
#include "backend/cuda/ops.h"
#include "backend/cuda/runtime.h"

namespace mt::cuda {

namespace {

// Throws naming the first id in ids[b, s] outside [0, limit), as the CPU kernels do.
void check_ids(const TensorView& ids, int64_t limit, const char* op, const char* name, const char* table) {
  int32_t value = 0;
  const int64_t k = first_id_out_of_range(ids.i32(), ids.numel(), limit, &value);
  const int64_t s = ids.dim(1);
  if (k >= 0)
    MT_FAIL() << op << ": " << name << "[" << k / s << ", " << k % s << "] = " << value << " is out of range [0, "
              << limit << ") of " << table;
}

}  // namespace

void embedding_fwd(const TensorView& out, const TensorView& tokens, const TensorView& positions,
                   const TensorView& word, const TensorView& pos_table, int64_t vocab_start, int64_t vocab_total) {
  const char* op = "embedding_fwd";
  const int64_t b = tokens.dim(0), s = tokens.dim(1), h = word.dim(1);
  const bool use_pos = !pos_table.empty(), explicit_pos = use_pos && !positions.empty();
  check_ids(tokens, vocab_total, op, "tokens", "the word embedding (vocabulary size)");
  if (explicit_pos) check_ids(positions, pos_table.dim(0), op, "positions", "the position embedding");
  if (b * s * h == 0) return;
  k::embedding_fwd(out.f32(), tokens.i32(), explicit_pos ? positions.i32() : nullptr, word.f32(),
                   use_pos ? pos_table.f32() : nullptr, b, s, h, word.dim(0), vocab_start, stream());
  check_launch(op);
}

void embedding_bwd(const TensorView& dword, const TensorView& dpos_table, const TensorView& dout,
                   const TensorView& tokens, const TensorView& positions, int64_t vocab_start, int64_t vocab_total) {
  const char* op = "embedding_bwd";
  const int64_t b = tokens.dim(0), s = tokens.dim(1), h = dword.dim(1);
  const bool use_pos = !dpos_table.empty(), explicit_pos = use_pos && !positions.empty();
  check_ids(tokens, vocab_total, op, "tokens", "the word embedding (vocabulary size)");
  if (explicit_pos) check_ids(positions, dpos_table.dim(0), op, "positions", "the position embedding");
  if (b * s * h == 0) return;
  k::embedding_bwd(dword.f32(), use_pos ? dpos_table.f32() : nullptr, dout.f32(), tokens.i32(),
                   explicit_pos ? positions.i32() : nullptr, b, s, h, dword.dim(0), vocab_start, stream());
  check_launch(op);
}

}  // namespace mt::cuda
