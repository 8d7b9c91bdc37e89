#include "parallel/shard.h"

namespace mt {

Shape shard_shape(const Shape& full, const ShardSpec& spec, int t) {
  if (!spec.sharded() || t == 1) return full;
  MT_CHECK(spec.dim < full.ndim && spec.blocks > 0 && full.dims[spec.dim] % (spec.blocks * t) == 0)
      << "cannot split dimension " << spec.dim << " of " << full.str() << " into " << spec.blocks << " x " << t
      << " equal parts";
  Shape s = full;
  s.dims[spec.dim] /= t;
  return s;
}

int64_t shard_global_index(const Shape& full, const ShardSpec& spec, int t, int r, int64_t i) {
  if (!spec.sharded() || t == 1) return i;
  const Shape local = shard_shape(full, spec, t);
  // Split i into (outer, along, inner) around the split dimension.
  int64_t inner = 1;
  for (int d = spec.dim + 1; d < full.ndim; ++d) inner *= full.dims[d];
  const int64_t along_local = local.dims[spec.dim], along_full = full.dims[spec.dim];
  const int64_t in = i % inner, along = (i / inner) % along_local, outer = i / (inner * along_local);
  // Local index `along` lies in block along / part of the shard; the rank's part of that block.
  const int64_t part = along_full / (spec.blocks * t), block = along / part;
  const int64_t global_along = block * (along_full / spec.blocks) + r * part + along % part;
  return (outer * along_full + global_along) * inner + in;
}

}  // namespace mt
