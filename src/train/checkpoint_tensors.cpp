#include "train/checkpoint_tensors.h"

#include <algorithm>

#include "base/error.h"
#include "model/params.h"

namespace mt {

namespace {

float element(const TensorView& t, int64_t i) {
  switch (t.dtype) {
    case DType::f32: return t.f32()[i];
    case DType::bf16: return bf16_to_f32(t.bf16()[i]);
    case DType::f16: return f16_to_f32(t.f16()[i]);
    default: MT_FAIL() << "checkpoint: a " << dtype_name(t.dtype) << " piece";
  }
}

void set_element(const TensorView& t, int64_t i, float x) {
  switch (t.dtype) {
    case DType::f32: t.f32()[i] = x; return;
    case DType::bf16: t.bf16()[i] = f32_to_bf16(x); return;
    case DType::f16: t.f16()[i] = f32_to_f16(x); return;
    default: MT_FAIL() << "checkpoint: cannot restore a " << dtype_name(t.dtype) << " tensor";
  }
}

// n = t.numel() elements of t into out as f32, and back.
void to_f32(const TensorView& t, float* out) {
  const int64_t n = t.numel();
  switch (t.dtype) {
    case DType::f32: std::copy(t.f32(), t.f32() + n, out); return;
    case DType::bf16:
      for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(t.bf16()[i]);
      return;
    default:
      for (int64_t i = 0; i < n; ++i) out[i] = element(t, i);
  }
}

void from_f32(const float* in, const TensorView& t) {
  const int64_t n = t.numel();
  switch (t.dtype) {
    case DType::f32: std::copy(in, in + n, t.f32()); return;
    case DType::bf16:
      for (int64_t i = 0; i < n; ++i) t.bf16()[i] = f32_to_bf16(in[i]);
      return;
    default:
      for (int64_t i = 0; i < n; ++i) set_element(t, i, in[i]);
  }
}

std::string shape_text(const Shape& s) { return TensorView(nullptr, DType::f32, s).str().substr(3); }

// The saved shape may differ from the model's only in a vocabulary tensor's rows, and by at most
// what the padding to a multiple of 128 x tp (tp <= 1024) can add.
bool compatible(const Shape& saved, const Shape& expected, bool vocabulary) {
  if (saved == expected) return true;
  if (!vocabulary || saved.ndim != expected.ndim || expected.ndim == 0) return false;
  for (int d = 1; d < expected.ndim; ++d)
    if (saved.dims[d] != expected.dims[d]) return false;
  return saved.dims[0] >= 1 && saved.dims[0] <= expected.dims[0] + 128 * 1024;
}

}  // namespace

CheckpointTensors::CheckpointTensors(std::vector<ShardFile> files) : files_(std::move(files)) {
  for (const ShardFile& f : files_)
    for (const TensorRecord& r : f.records()) pieces_[r.key()].push_back(&r);
}

const std::vector<float>& CheckpointTensors::whole(const std::string& kind, const std::string& name,
                                                   const Shape& expected, Shape& shape) {
  const auto it = pieces_.find(kind + "/" + name);
  MT_CHECK(it != pieces_.end()) << "the checkpoint holds no " << kind << " of " << name;
  shape = it->second.front()->global_shape;
  MT_CHECK(compatible(shape, expected, is_vocabulary_param(name)))
      << "checkpoint: " << kind << " of " << name << " has shape " << shape_text(shape) << ", the model's is "
      << shape_text(expected) << " (a checkpoint of another model?)";
  std::vector<float>& out = whole_;
  std::vector<uint8_t>& seen = seen_;
  out.resize(static_cast<size_t>(shape.numel()));  // every element is overwritten (or the gap is an error)
  seen.assign(out.size(), 0);
  for (const TensorRecord* r : it->second) {
    MT_CHECK(r->global_shape == shape) << "the checkpoint's pieces of " << kind << " " << name << " disagree on its shape";
    const ShardSpec spec{r->shard_dim, r->shard_groups};
    // A piece must describe a split that exists: every index computed below then lies in the tensor.
    MT_CHECK(r->tp_size >= 1 && r->tp_rank >= 0 && r->tp_rank < r->tp_size && r->shard_groups >= 1 &&
             r->shard_dim >= -1 && r->shard_dim < shape.ndim)
        << "a piece of " << kind << " " << name << " describes an impossible split (rank " << r->tp_rank << " of "
        << r->tp_size << ", dimension " << r->shard_dim << ")";
    const int64_t local = spec.sharded() ? shard_shape(shape, spec, r->tp_size).numel() : shape.numel();
    MT_CHECK(r->begin >= 0 && r->begin <= r->end && r->end <= local)
        << "a piece of " << kind << " " << name << " covers [" << r->begin << ", " << r->end << ") of a shard of "
        << local << " elements";
    if (!spec.sharded()) {  // a contiguous range of the whole tensor
      to_f32(r->data, out.data() + r->begin);
      std::fill(seen.begin() + r->begin, seen.begin() + r->end, uint8_t{1});
      continue;
    }
    for (int64_t i = 0; i < r->end - r->begin; ++i) {
      const int64_t at = r->begin + i;
      const int64_t g = spec.sharded() ? shard_global_index(shape, spec, r->tp_size, r->tp_rank, at) : at;
      MT_CHECK(g >= 0 && g < shape.numel()) << "a piece of " << kind << " " << name << " lies outside the tensor";
      out[static_cast<size_t>(g)] = element(r->data, i);
      seen[static_cast<size_t>(g)] = 1;
    }
  }
  const auto gap = std::find(seen.begin(), seen.end(), uint8_t{0});
  MT_CHECK(gap == seen.end()) << "the checkpoint's pieces of " << kind << " " << name << " leave element "
                              << gap - seen.begin() << " of " << shape_text(shape)
                              << " uncovered (a shard file is missing from the checkpoint)";
  return out;
}

TensorRecord tensor_piece(const std::string& name, const std::string& kind, const Shape& whole, const ShardSpec& spec,
                          int tp_rank, int tp, int64_t begin, const TensorView& data) {
  TensorRecord r;
  r.name = name;
  r.kind = kind;
  r.global_shape = whole;
  r.shard_dim = spec.dim;
  r.shard_groups = static_cast<int>(spec.blocks);
  r.tp_rank = tp_rank;
  r.tp_size = tp;
  r.begin = begin;
  r.end = begin + data.numel();
  r.data = data;
  return r;
}

void take_piece(const std::vector<float>& src, const Shape& src_shape, const Shape& full, const ShardSpec& spec, int t,
                int r, int64_t begin, const TensorView& dst, const std::string& what) {
  MT_CHECK(compatible(src_shape, full, is_vocabulary_param(what)))
      << "checkpoint: " << what << " has shape " << shape_text(src_shape) << ", the model's is " << shape_text(full)
      << " (a checkpoint of another model?)";
  if (!spec.sharded() && src_shape == full) {  // a contiguous range of the whole tensor
    from_f32(src.data() + begin, dst);
    return;
  }
  const int64_t row = full.ndim >= 1 ? full.numel() / std::max<int64_t>(full.dims[0], 1) : 1;
  const int64_t src_rows = src_shape.ndim >= 1 ? src_shape.dims[0] : 1;
  for (int64_t i = 0; i < dst.numel(); ++i) {
    const int64_t g = spec.sharded() ? shard_global_index(full, spec, t, r, begin + i) : begin + i;
    // The same element in the saved tensor: same row and column, when it has that row.
    const bool present = g / row < src_rows;
    set_element(dst, i, present ? src[static_cast<size_t>(g)] : 0.0f);
  }
}

}  // namespace mt
