// Validates attention / RoPE shapes and options once for every backend, then routes to the backend
// owning the memory.
#include "ops/attention.h"
#include "ops/dispatch.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/attention.h"

namespace mt {

namespace {

struct Heads {
  int64_t b, n, g, s, d;
  int64_t sk;  // key rows: s, or k's own under context parallelism
};

enum class KeyRows { same, own };

// q [b, n, s, d], k and v [b, g, s, d] (or [b, g, sk, d] with KeyRows::own) with g dividing n; all f32.
Heads check_heads(const char* op, const TensorView& q, const TensorView& k, const TensorView& v, const char* qn,
                  const char* kn, const char* vn, KeyRows key_rows = KeyRows::same) {
  MT_CHECK(q.ndim() == 4 && k.ndim() == 4) << op << ": " << qn << " " << q.str() << " must be [b, n, s, d] and " << kn
                                           << " " << k.str() << " [b, g, s, d]";
  const Heads h{q.dim(0), q.dim(1), k.dim(1), q.dim(2), q.dim(3), key_rows == KeyRows::own ? k.dim(2) : q.dim(2)};
  MT_CHECK(h.n >= 1 && h.g >= 1 && h.n % h.g == 0)
      << op << ": " << h.n << " query heads must be a positive multiple of " << h.g
      << " key/value heads (query groups); check --num-query-groups";
  MT_CHECK(h.s >= 1 && h.sk >= 1 && h.d >= 1)
      << op << ": empty sequence or head dim in " << qn << " " << q.str() << " or " << kn << " " << k.str();
  // The CPU kernels pass row strides (b·n·d) and lengths to cblas as int.
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  MT_CHECK(h.b * h.n * h.d <= kIntMax && h.s <= kIntMax && h.sk <= kIntMax)
      << op << ": " << qn << " " << q.str() << " is too large for 32-bit BLAS strides";
  check_shape(k, {h.b, h.g, h.sk, h.d}, op, kn);
  check_shape(v, {h.b, h.g, h.sk, h.d}, op, vn);
  check_dtype(q, DType::f32, op, qn);
  check_dtype(k, DType::f32, op, kn);
  check_dtype(v, DType::f32, op, vn);
  return h;
}

// rows: s rows at positions o.position(0 .. s − 1) within [0, seq_length), increasing.
void check_rows(const char* op, const SeqRows& o, int64_t rows, int64_t seq_length, const char* name) {
  MT_CHECK(o.first >= 0 && o.split >= 1 && (rows <= o.split || o.second >= o.first + o.split))
      << op << ": " << name << " (first " << o.first << ", split " << o.split << ", second " << o.second
      << ") must be two runs of increasing positions";
  MT_CHECK(o.position(rows - 1) < seq_length)
      << op << ": " << name << " reach position " << o.position(rows - 1) << ", beyond the sequence's " << seq_length;
}

// Whether the options place queries and keys other than at positions 0 .. s − 1 (context parallelism).
bool shifted_rows(const AttentionOptions& o, const Heads& h) {
  return h.sk != h.s || !o.q_rows.identity(h.s) || !o.k_rows.identity(h.sk) || (o.seq_length && o.seq_length != h.s);
}

void check_options(const char* op, const AttentionOptions& o, const Heads& h) {
  const int64_t n = h.n;
  const int64_t seq_length = o.seq_length ? o.seq_length : h.s;
  MT_CHECK(seq_length >= h.s && seq_length >= h.sk)
      << op << ": seq_length " << seq_length << " is shorter than the " << std::max(h.s, h.sk) << " rows given";
  check_rows(op, o.q_rows, h.s, seq_length, "query rows");
  check_rows(op, o.k_rows, h.sk, seq_length, "key rows");
  if (!o.key_start.empty()) {
    MT_CHECK(!shifted_rows(o, h)) << op << ": document masks (key_start) need queries and keys at positions 0 .. s − 1";
    check_dtype(o.key_start, DType::i32, op, "key_start");
    check_shape(o.key_start, {h.b, h.s}, op, "key_start ([b, s])");
  }
  MT_CHECK(std::isfinite(o.scale)) << op << ": scale " << o.scale << " is not finite";
  MT_CHECK(o.dropout_p >= 0.0f && o.dropout_p < 1.0f)
      << op << ": dropout_p " << o.dropout_p << " must be in [0, 1); check --attention-dropout";
  const int64_t total = o.total_heads ? o.total_heads : n;
  MT_CHECK(o.head_offset >= 0 && o.head_offset + n <= total)
      << op << ": local heads [" << o.head_offset << ", " << o.head_offset + n << ") do not fit in total_heads "
      << total;
}

// cos/sin: both empty (no RoPE) or both f32 [P, R] with P >= s and 1 <= R <= d/2 (R pairs rotated, the
// rest of the head passed through).  Returns whether RoPE applies.
bool check_rope(const char* op, const TensorView& cos, const TensorView& sin, int64_t s, int64_t d) {
  MT_CHECK(cos.empty() == sin.empty()) << op << ": give both cos and sin tables or neither";
  if (cos.empty()) return false;
  MT_CHECK(cos.ndim() == 2 && cos.dim(1) >= 1 && 2 * cos.dim(1) <= d)
      << op << ": cos " << cos.str() << " must be [positions, R] with 1 <= R <= " << d / 2 << " rotated pairs for head dim "
      << d << " (R = ceil(rotary dim / 2); check --rotary-percent)";
  MT_CHECK(cos.dim(0) >= s) << op << ": RoPE tables cover " << cos.dim(0) << " positions, sequence has " << s
                            << "; build them with at least --max-position-embeddings rows";
  check_shape(sin, cos.shape, op, "sin");
  check_dtype(cos, DType::f32, op, "cos");
  check_dtype(sin, DType::f32, op, "sin");
  return true;
}

void check_rope_form(const char* op, RopeForm form) {
  MT_CHECK(form == RopeForm::rotate_half || form == RopeForm::interleaved)
      << op << ": unknown RoPE form " << static_cast<int>(form);
}

// positions: empty, or i32 [b, s] (its values are checked by the backend, which can read them).
void check_positions(const char* op, const TensorView& positions, const Heads& h) {
  if (positions.empty()) return;
  check_dtype(positions, DType::i32, op, "positions");
  check_shape(positions, {h.b, h.s}, op, "positions ([b, s])");
}

void check_grads_f32(const char* op, const TensorView& dq, const TensorView& dk, const TensorView& dv,
                     const TensorView& dout) {
  check_dtype(dq, DType::f32, op, "dq");
  check_dtype(dk, DType::f32, op, "dk");
  check_dtype(dv, DType::f32, op, "dv");
  check_dtype(dout, DType::f32, op, "dout");
}

void check_workspace(const char* op, const TensorView& workspace, const Heads& h) {
  check_dtype(workspace, DType::f32, op, "workspace");
  const size_t need = attention_workspace_floats(h.b, h.n, std::max(h.s, h.sk), h.d, 1, workspace.device);
  MT_CHECK(!workspace.empty() && static_cast<size_t>(workspace.numel()) >= need)
      << op << ": workspace has " << workspace.numel() << " floats, needs at least " << need
      << " (attention_workspace_floats(b, n, max(s, sk), d, threads))";
}

}  // namespace

size_t attention_workspace_floats(int64_t b, int64_t n, int64_t s, int64_t d, int threads, Device device) {
  MT_ROUTE(device, "attention_workspace_floats", attention_workspace_floats(b, n, s, d, threads));
}

void rope_tables(const TensorView& cos, const TensorView& sin, double base, int64_t rotary_dim) {
  const char* op = "rope_tables";
  MT_CHECK(cos.ndim() == 2 && cos.dim(1) >= 1) << op << ": cos " << cos.str() << " must be [positions, R]";
  check_shape(sin, cos.shape, op, "sin");
  check_dtype(cos, DType::f32, op, "cos");
  check_dtype(sin, DType::f32, op, "sin");
  MT_CHECK(base > 0.0 && std::isfinite(base)) << op << ": base " << base << " must be positive; check --rotary-base";
  if (rotary_dim == 0) rotary_dim = 2 * cos.dim(1);
  MT_CHECK(rotary_dim >= 1 && (rotary_dim + 1) / 2 == cos.dim(1))
      << op << ": rotary dim " << rotary_dim << " needs " << (rotary_dim + 1) / 2 << " table columns (ceil(r/2)), cos has "
      << cos.dim(1);
  check_same_device({cos, sin}, op);
  MT_ROUTE(cos.device, op, rope_tables(cos, sin, base, rotary_dim));
}

void qkv_split_rope_fwd(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& qkv,
                        const TensorView& cos, const TensorView& sin, const TensorView& positions, RopeForm form) {
  const char* op = "qkv_split_rope_fwd";
  const Heads h = check_heads(op, q, k, v, "q", "k", "v");
  check_shape(qkv, {h.s, h.b, (h.n + 2 * h.g) * h.d}, op, "qkv");
  check_dtype(qkv, DType::f32, op, "qkv");
  check_rope(op, cos, sin, h.s, h.d);
  check_rope_form(op, form);
  check_positions(op, positions, h);
  check_same_device({q, k, v, qkv, cos, sin, positions}, op);
  MT_ROUTE(qkv.device, op, qkv_split_rope_fwd(q, k, v, qkv, cos, sin, positions, form));
}

void qkv_split_rope_bwd(const TensorView& dqkv, const TensorView& dq, const TensorView& dk, const TensorView& dv,
                        const TensorView& cos, const TensorView& sin, const TensorView& positions, RopeForm form) {
  const char* op = "qkv_split_rope_bwd";
  const Heads h = check_heads(op, dq, dk, dv, "dq", "dk", "dv");
  check_shape(dqkv, {h.s, h.b, (h.n + 2 * h.g) * h.d}, op, "dqkv");
  check_dtype(dqkv, DType::f32, op, "dqkv");
  check_rope(op, cos, sin, h.s, h.d);
  check_rope_form(op, form);
  check_positions(op, positions, h);
  check_same_device({dqkv, dq, dk, dv, cos, sin, positions}, op);
  MT_ROUTE(dqkv.device, op, qkv_split_rope_bwd(dqkv, dq, dk, dv, cos, sin, positions, form));
}

void attention_fwd(const TensorView& out, const TensorView& lse, const TensorView& q, const TensorView& k,
                   const TensorView& v, const AttentionOptions& options) {
  const char* op = "attention_fwd";
  const Heads h = check_heads(op, q, k, v, "q", "k", "v", KeyRows::own);
  check_options(op, options, h);
  check_shape(out, {h.s, h.b, h.n * h.d}, op, "out");
  check_shape(lse, {h.b, h.n, h.s}, op, "lse");
  check_dtype(out, DType::f32, op, "out");
  check_dtype(lse, DType::f32, op, "lse");
  check_same_device({out, lse, q, k, v, options.key_start}, op);
  MT_ROUTE(q.device, op, attention_fwd(out, lse, q, k, v, options));
}

void attention_bwd(const TensorView& dq, const TensorView& dk, const TensorView& dv, const TensorView& dout,
                   const TensorView& out, const TensorView& lse, const TensorView& q, const TensorView& k,
                   const TensorView& v, const AttentionOptions& options, const TensorView& workspace) {
  const char* op = "attention_bwd";
  const Heads h = check_heads(op, q, k, v, "q", "k", "v", KeyRows::own);
  check_options(op, options, h);
  check_shape(dq, q.shape, op, "dq");
  check_shape(dk, k.shape, op, "dk");
  check_shape(dv, v.shape, op, "dv");
  check_shape(dout, {h.s, h.b, h.n * h.d}, op, "dout");
  check_shape(out, {h.s, h.b, h.n * h.d}, op, "out");
  check_shape(lse, {h.b, h.n, h.s}, op, "lse");
  check_grads_f32(op, dq, dk, dv, dout);
  check_dtype(out, DType::f32, op, "out");
  check_dtype(lse, DType::f32, op, "lse");
  check_workspace(op, workspace, h);
  check_same_device({dq, dk, dv, dout, out, lse, q, k, v, workspace, options.key_start}, op);
  MT_ROUTE(q.device, op, attention_bwd(dq, dk, dv, dout, out, lse, q, k, v, options, workspace));
}

void attention_merge(const TensorView& out, const TensorView& lse, const TensorView& out_part,
                     const TensorView& lse_part) {
  const char* op = "attention_merge";
  MT_CHECK(lse.ndim() == 3 && out.ndim() == 3 && lse.dim(1) >= 1 && out.dim(2) % lse.dim(1) == 0)
      << op << ": lse " << lse.str() << " must be [b, n, s] and out " << out.str() << " [s, b, n·d]";
  check_shape(out, {lse.dim(2), lse.dim(0), out.dim(2)}, op, "out");
  check_shape(out_part, out.shape, op, "out_part");
  check_shape(lse_part, lse.shape, op, "lse_part");
  for (const TensorView* t : {&out, &lse, &out_part, &lse_part}) check_dtype(*t, DType::f32, op, "out, lse and parts");
  check_same_device({out, lse, out_part, lse_part}, op);
  MT_ROUTE(out.device, op, attention_merge(out, lse, out_part, lse_part));
}

void attention_probs_fwd(const TensorView& out, const TensorView& probs, const TensorView& mask,
                         const TensorView& q, const TensorView& k, const TensorView& v,
                         const AttentionOptions& options) {
  const char* op = "attention_probs_fwd";
  const Heads h = check_heads(op, q, k, v, "q", "k", "v");
  check_options(op, options, h);
  MT_CHECK(!shifted_rows(options, h)) << op << ": the materialising path takes queries and keys at positions 0 .. s − 1 "
                                      << "(context parallelism needs the flash path)";
  check_shape(out, {h.s, h.b, h.n * h.d}, op, "out");
  check_shape(probs, {h.b, h.n, h.s, h.s}, op, "probs");
  check_dtype(out, DType::f32, op, "out");
  check_dtype(probs, DType::f32, op, "probs");
  MT_CHECK(options.dropout_p == 0.0f || !mask.empty()) << op << ": dropout_p > 0 needs a mask [b, n, s, s] (u8)";
  if (!mask.empty()) {
    check_shape(mask, {h.b, h.n, h.s, h.s}, op, "mask");
    check_dtype(mask, DType::u8, op, "mask");
  }
  check_same_device({out, probs, mask, q, k, v, options.key_start}, op);
  MT_ROUTE(q.device, op, attention_probs_fwd(out, probs, mask, q, k, v, options));
}

void attention_probs_bwd(const TensorView& dq, const TensorView& dk, const TensorView& dv, const TensorView& dout,
                         const TensorView& probs, const TensorView& mask, const TensorView& q, const TensorView& k,
                         const TensorView& v, const AttentionOptions& options, const TensorView& workspace) {
  const char* op = "attention_probs_bwd";
  const Heads h = check_heads(op, q, k, v, "q", "k", "v");
  check_options(op, options, h);
  MT_CHECK(!shifted_rows(options, h)) << op << ": the materialising path takes queries and keys at positions 0 .. s − 1 "
                                      << "(context parallelism needs the flash path)";
  check_shape(dq, q.shape, op, "dq");
  check_shape(dk, k.shape, op, "dk");
  check_shape(dv, v.shape, op, "dv");
  check_shape(dout, {h.s, h.b, h.n * h.d}, op, "dout");
  check_shape(probs, {h.b, h.n, h.s, h.s}, op, "probs");
  check_grads_f32(op, dq, dk, dv, dout);
  check_dtype(probs, DType::f32, op, "probs");
  MT_CHECK(options.dropout_p == 0.0f || !mask.empty())
      << op << ": dropout_p > 0 needs the mask saved by attention_probs_fwd";
  if (!mask.empty()) {
    check_shape(mask, {h.b, h.n, h.s, h.s}, op, "mask");
    check_dtype(mask, DType::u8, op, "mask");
  }
  check_workspace(op, workspace, h);
  check_same_device({dq, dk, dv, dout, probs, mask, q, k, v, workspace, options.key_start}, op);
  MT_ROUTE(q.device, op, attention_probs_bwd(dq, dk, dv, dout, probs, mask, q, k, v, options, workspace));
}

namespace {

// The cache [slots, g, P, d] and the step's rows (slots, positions [T], each in range).
void check_kv_cache(const char* op, const TensorView& k_cache, const TensorView& v_cache, int64_t g, int64_t d,
                    const TensorView& slots, const TensorView& positions, int64_t tokens) {
  MT_CHECK(k_cache.ndim() == 4) << op << ": k_cache " << k_cache.str() << " must be [slots, g, P, d]";
  check_shape(k_cache, {k_cache.dim(0), g, k_cache.dim(2), d}, op, "k_cache");
  check_shape(v_cache, k_cache.shape, op, "v_cache");
  check_dtype(k_cache, DType::f32, op, "k_cache");
  check_dtype(v_cache, DType::f32, op, "v_cache");
  check_shape(slots, {tokens}, op, "slots");
  check_shape(positions, {tokens}, op, "positions");
  check_dtype(slots, DType::i32, op, "slots");
  check_dtype(positions, DType::i32, op, "positions");
  // The indices may live on a device: read them through its backend (a few ints per step).
  std::vector<int32_t> slot_copy, position_copy;
  const int32_t* slot = host_i32(slots, slot_copy);
  const int32_t* position = host_i32(positions, position_copy);
  for (int64_t t = 0; t < tokens; ++t) {
    MT_CHECK(slot[t] >= 0 && slot[t] < k_cache.dim(0))
        << op << ": row " << t << " names cache slot " << slot[t] << " of " << k_cache.dim(0);
    MT_CHECK(position[t] >= 0 && position[t] < k_cache.dim(2))
        << op << ": row " << t << " is at position " << position[t] << ", beyond the cache's " << k_cache.dim(2)
        << " (the longest sequence it holds)";
  }
}

}  // namespace

void kv_cache_write(const TensorView& k_cache, const TensorView& v_cache, const TensorView& k, const TensorView& v,
                    const TensorView& slots, const TensorView& positions) {
  const char* op = "kv_cache_write";
  const Heads h = check_heads(op, k, k, v, "k", "k", "v");
  MT_CHECK(h.b == 1) << op << ": k " << k.str() << " must be [1, g, T, d] (one batch of rows)";
  check_shape(v, k.shape, op, "v");
  check_dtype(k, DType::f32, op, "k");
  check_dtype(v, DType::f32, op, "v");
  check_kv_cache(op, k_cache, v_cache, h.n, h.d, slots, positions, h.s);
  check_same_device({k_cache, v_cache, k, v, slots, positions}, op);
  MT_ROUTE(k.device, op, kv_cache_write(k_cache, v_cache, k, v, slots, positions));
}

void kv_cache_attention_fwd(const TensorView& out, const TensorView& q, const TensorView& k_cache,
                            const TensorView& v_cache, const TensorView& slots, const TensorView& positions,
                            float scale) {
  const char* op = "kv_cache_attention_fwd";
  MT_CHECK(q.ndim() == 4 && q.dim(0) == 1 && k_cache.ndim() == 4)
      << op << ": q " << q.str() << " must be [1, n, T, d] and k_cache " << k_cache.str() << " [slots, g, P, d]";
  const int64_t n = q.dim(1), tokens = q.dim(2), d = q.dim(3), g = k_cache.dim(1);
  MT_CHECK(g >= 1 && n % g == 0) << op << ": " << n << " query heads must be a multiple of " << g << " key/value heads";
  check_dtype(q, DType::f32, op, "q");
  check_shape(out, {tokens, n * d}, op, "out");
  check_dtype(out, DType::f32, op, "out");
  MT_CHECK(std::isfinite(scale)) << op << ": scale " << scale << " is not finite";
  check_kv_cache(op, k_cache, v_cache, g, d, slots, positions, tokens);
  check_same_device({out, q, k_cache, v_cache, slots, positions}, op);
  MT_ROUTE(q.device, op, kv_cache_attention_fwd(out, q, k_cache, v_cache, slots, positions, scale));
}

}  // namespace mt
