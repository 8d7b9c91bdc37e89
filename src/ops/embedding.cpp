// Validates the embedding op's shapes once for every backend, then routes to the backend owning the
// memory (the backend checks the id values, which only it can read).
#include "ops/embedding.h"
#include "ops/dispatch.h"

#include "backend/cpu/embedding.h"

namespace mt {

namespace {

void check_present(const TensorView& t, const char* op, const char* name) {
  MT_CHECK(!t.empty() || t.numel() == 0) << op << ": " << name << " " << t.str() << " has no data";
}

// Checks tokens/positions/table shapes; returns h.  `table` is word (or dword), `pos` pos_table.
int64_t check_embedding_args(const TensorView& tokens, const TensorView& positions, const TensorView& table,
                             const TensorView& pos, const char* op, const char* table_name, const char* pos_name) {
  check_dtype(tokens, DType::i32, op, "tokens");
  MT_CHECK(tokens.ndim() == 2) << op << ": tokens is " << tokens.str() << "; expected [b, s] (data layout)";
  check_present(tokens, op, "tokens");
  const int64_t b = tokens.dim(0), s = tokens.dim(1);
  check_dtype(table, DType::f32, op, table_name);
  MT_CHECK(table.ndim() == 2) << op << ": " << table_name << " is " << table.str() << "; expected [V, h]";
  check_present(table, op, table_name);
  const int64_t h = table.dim(1);
  if (!positions.empty()) {
    check_dtype(positions, DType::i32, op, "positions");
    check_shape(positions, {b, s}, op, "positions");
  }
  if (!pos.empty()) {
    check_dtype(pos, DType::f32, op, pos_name);
    MT_CHECK(pos.ndim() == 2 && pos.dim(1) == h)
        << op << ": " << pos_name << " is " << pos.str() << "; expected [P, " << h << "]";
    if (positions.empty()) {
      MT_CHECK(s <= pos.dim(0)) << op << ": sequence length " << s << " exceeds the " << pos.dim(0)
                                << " rows of " << pos_name << " (raise --max-position-embeddings)";
    }
  }
  return h;
}

int64_t total(const VocabShard& shard, const TensorView& table) { return shard.total ? shard.total : table.dim(0); }

void check_shard(const VocabShard& shard, const TensorView& table, const char* op) {
  if (shard.total == 0) {
    MT_CHECK(shard.start == 0) << op << ": a shard start needs the total vocabulary size";
    return;
  }
  MT_CHECK(shard.start >= 0 && shard.start + table.dim(0) <= shard.total)
      << op << ": shard rows [" << shard.start << ", " << shard.start + table.dim(0) << ") exceed the vocabulary of "
      << shard.total;
}

}  // namespace

void embedding_fwd(const TensorView& out, const TensorView& tokens, const TensorView& positions,
                   const TensorView& word, const TensorView& pos_table, VocabShard shard) {
  const char* op = "embedding_fwd";
  const int64_t h = check_embedding_args(tokens, positions, word, pos_table, op, "word", "pos_table");
  check_dtype(out, DType::f32, op, "out");
  check_shape(out, {tokens.dim(1), tokens.dim(0), h}, op, "out ([s, b, h])");
  check_present(out, op, "out");
  check_shard(shard, word, op);
  check_same_device({out, tokens, positions, word, pos_table}, op);
  MT_ROUTE(out.device, op, embedding_fwd(out, tokens, positions, word, pos_table, shard.start, total(shard, word)));
}

void embedding_bwd(const TensorView& dword, const TensorView& dpos_table, const TensorView& dout,
                   const TensorView& tokens, const TensorView& positions, VocabShard shard) {
  const char* op = "embedding_bwd";
  const int64_t h = check_embedding_args(tokens, positions, dword, dpos_table, op, "dword", "dpos_table");
  check_dtype(dout, DType::f32, op, "dout");
  check_shape(dout, {tokens.dim(1), tokens.dim(0), h}, op, "dout ([s, b, h])");
  check_present(dout, op, "dout");
  check_shard(shard, dword, op);
  check_same_device({dword, dpos_table, dout, tokens, positions}, op);
  MT_ROUTE(dout.device, op, embedding_bwd(dword, dpos_table, dout, tokens, positions, shard.start, total(shard, dword)));
}

}  // namespace mt
