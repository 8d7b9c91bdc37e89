// Megatron's tensor-parallel mappings against what they mean on whole tensors: every rank builds
// every rank's input (seeded by rank), so the expected result is computed locally.
#include "parallel/mappings.h"
#include "parallel_testing.h"

namespace mt::test {
namespace {

constexpr int64_t kRows = 128, kCols = 96;  // rows: s·b tokens; cols: features

TensorParallel tp() { return TensorParallel{&world(), true}; }

// Rank r's tensor of the given shape.
HostTensor of_rank(int r, Shape shape) { return randn(shape, 100 + static_cast<uint64_t>(r)); }

HostTensor sum_over_ranks(Shape shape) {
  HostTensor sum(DType::f32, shape);
  for (int r = 0; r < world().size(); ++r) {
    HostTensor x = of_rank(r, shape);
    for (int64_t i = 0; i < sum.numel(); ++i) sum.f32()[i] += x.f32()[i];
  }
  return sum;
}

// Whole [kRows, C] from every rank's [kRows, C/t] column block, or [R, ...] from row blocks.
HostTensor concat_columns(int64_t part_cols) {
  const int t = world().size();
  HostTensor whole(DType::f32, {kRows, part_cols * t});
  for (int r = 0; r < t; ++r) {
    HostTensor x = of_rank(r, {kRows, part_cols});
    for (int64_t i = 0; i < kRows; ++i)
      for (int64_t j = 0; j < part_cols; ++j) whole.f32()[i * part_cols * t + r * part_cols + j] = x.f32()[i * part_cols + j];
  }
  return whole;
}

HostTensor concat_rows(int64_t part_rows) {
  const int t = world().size();
  HostTensor whole(DType::f32, {part_rows * t, kCols});
  for (int r = 0; r < t; ++r) {
    HostTensor x = of_rank(r, {part_rows, kCols});
    std::copy(x.f32(), x.f32() + x.numel(), whole.f32() + r * x.numel());
  }
  return whole;
}

TEST(TpMappings, CopyToTpAndReduceFromTp) {
  const int r = world().rank();
  HostTensor expected = sum_over_ranks({kRows, kCols});
  HostTensor g = of_rank(r, {kRows, kCols});
  copy_to_tp_bwd(tp(), g.view());
  expect_close(g, expected, 1e-6, 1e-6, "copy_to_tp backward");
  HostTensor x = of_rank(r, {kRows, kCols});
  reduce_from_tp_fwd(tp(), x.view());
  expect_close(x, expected, 1e-6, 1e-6, "reduce_from_tp forward");
}

TEST(TpMappings, ScatterAndGatherAlongFeatures) {
  const int t = world().size(), r = world().rank();
  const int64_t part = kCols / t;
  HostTensor whole = of_rank(0, {kRows, kCols});  // the same on every rank
  HostTensor out(DType::f32, {kRows, part});
  scatter_to_tp_fwd(tp(), out.view(), whole.view());
  HostTensor expected = shard_of(whole, ShardSpec{1, 1}, t, r);
  expect_close(out, expected, 1e-12, 0, "scatter_to_tp forward");

  HostTensor scratch(DType::f32, {kRows * kCols}), gathered(DType::f32, {kRows, kCols});
  HostTensor mine = of_rank(r, {kRows, part});
  HostTensor all = concat_columns(part);
  scatter_to_tp_bwd(tp(), gathered.view(), mine.view(), scratch.view());
  expect_close(gathered, all, 1e-12, 0, "scatter_to_tp backward");
  HostTensor gathered2(DType::f32, {kRows, kCols});
  gather_from_tp_fwd(tp(), gathered2.view(), mine.view(), scratch.view());
  expect_close(gathered2, all, 1e-12, 0, "gather_from_tp forward");
  HostTensor back(DType::f32, {kRows, part});
  gather_from_tp_bwd(tp(), back.view(), whole.view());
  expect_close(back, expected, 1e-12, 0, "gather_from_tp backward");
}

TEST(TpMappings, SequenceParallelScatterGatherReduceScatter) {
  const int t = world().size(), r = world().rank();
  const int64_t part = kRows / t;
  HostTensor whole = of_rank(0, {kRows, kCols});
  HostTensor block(DType::f32, {part, kCols});
  scatter_to_sp_fwd(tp(), block.view(), whole.view());
  HostTensor expected_block = row_block(whole, t, r);
  expect_close(block, expected_block, 1e-12, 0, "scatter_to_sp forward");

  HostTensor mine = of_rank(r, {part, kCols});
  HostTensor all = concat_rows(part);
  for (auto fn : {scatter_to_sp_bwd, gather_from_sp_fwd, reduce_scatter_to_sp_bwd}) {
    HostTensor out(DType::f32, {kRows, kCols});
    fn(tp(), out.view(), mine.view());
    expect_close(out, all, 1e-12, 0, "all-gather of the row blocks");
  }
  HostTensor sum = sum_over_ranks({kRows, kCols});
  HostTensor expected_sum_block = row_block(sum, t, r);
  HostTensor mine_whole = of_rank(r, {kRows, kCols});
  for (auto fn : {gather_from_sp_bwd, reduce_scatter_to_sp_fwd}) {
    HostTensor out(DType::f32, {part, kCols});
    fn(tp(), out.view(), mine_whole.view());
    expect_close(out, expected_sum_block, 1e-6, 1e-6, "reduce-scatter of the row blocks");
  }
}

}  // namespace
}  // namespace mt::test
