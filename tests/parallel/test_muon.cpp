// Muon over the parallel groups (optim/muon.h): each matrix split over tensor-parallel ranks (by
// rows, by columns, SwiGLU's two blocks, the QKV's query groups, an expert's rows over etp) gets
// the update one rank computes for the whole matrix; and under the distributed optimizer every
// rank's shard gets, bit for bit, the update of the unsharded optimizer.
#include <vector>

#include "model/param_layout.h"
#include "optim/optimizer.h"
#include "parallel_testing.h"
#include "train_testing.h"

namespace mt::test {
namespace {

struct Matrix {
  const char* name;
  Shape whole;
  ShardSpec spec;
  bool expert = false;
};

Param make_param(const Matrix& m, HostTensor& value, HostTensor& grad, int t, int r) {
  Param p;
  p.name = m.name;
  p.value = value.view();
  p.grad = grad.view();
  p.full_shape = m.whole;
  p.shard = m.spec;
  p.shard_size = t;
  p.shard_rank = r;
  p.expert = m.expert;
  return p;
}

TEST(Muon, TensorParallelMatricesGetTheWholeMatrixUpdate) {
  Communicator& tp = world();
  const int t = tp.size(), r = tp.rank();
  const std::vector<Matrix> matrices = {
      {"decoder.layers.0.mlp.linear_fc1.weight", {16, 12}, {0, 2}},        // SwiGLU: gate and up rows
      {"decoder.layers.0.mlp.linear_fc2.weight", {12, 16}, {1, 1}},        // row-parallel: columns
      {"decoder.layers.0.self_attention.linear_qkv.weight", {32, 12}, {0, 1}},  // 4 groups of q 4, k 2, v 2
      {"decoder.layers.0.mlp.experts.linear_fc1.weight", {2, 16, 12}, {1, 1}, true},  // each expert's rows over etp
  };
  MuonSetup setup;
  setup.config.bf16_iteration = false;  // f32: the layouts differ only in the order of sums
  setup.qkv = {4, 2, 2};
  std::vector<HostTensor> whole, whole_grad, local, local_grad;
  for (size_t k = 0; k < matrices.size(); ++k) {
    whole.push_back(randn(matrices[k].whole, 100 + k));
    whole_grad.push_back(randn(matrices[k].whole, 200 + k));
  }
  for (size_t k = 0; k < matrices.size(); ++k) {
    local.push_back(shard_of(whole[k], matrices[k].spec, t, r));
    local_grad.push_back(shard_of(whole_grad[k], matrices[k].spec, t, r));
  }
  std::vector<Param> reference, sharded;
  for (size_t k = 0; k < matrices.size(); ++k) {
    reference.push_back(make_param(matrices[k], whole[k], whole_grad[k], 1, 0));
    sharded.push_back(make_param(matrices[k], local[k], local_grad[k], t, r));
  }
  Optimizer alone(reference, cpu_backend(), nullptr, nullptr, {}, &setup);
  MuonSetup split = setup;
  split.tp = split.etp = &tp;
  Optimizer parallel(sharded, cpu_backend(), nullptr, nullptr, {}, &split);
  OptimizerConfig oc;
  oc.clip_grad = 0.0f;
  for (int step = 0; step < 2; ++step) {  // the second step sees the momentum too
    alone.step(oc, 1.0f, 0.0f);  // lr 1: the parameters move by the update itself
    parallel.step(oc, 1.0f, 0.0f);
  }
  for (size_t k = 0; k < matrices.size(); ++k) {
    SCOPED_TRACE(matrices[k].name);
    HostTensor want = shard_of(whole[k], matrices[k].spec, t, r);
    expect_close(local[k], want, 2e-4, 2e-4, "updated shard");
  }
}

// The distributed optimizer's buckets cut matrices at arbitrary elements: the momenta are gathered
// over dp, so each rank's part of every matrix moves exactly as the unsharded step moves it.
TEST(Muon, DistributedOptimizerShardsGetTheUnshardedUpdateBitForBit) {
  Communicator& dp = world();
  const std::vector<Shape> shapes = {{9, 13}, {13}, {21, 5}, {6, 6}};
  DdpConfig ddp;
  ddp.data_parallel_size = dp.size();
  ddp.use_distributed_optimizer = true;
  ddp.overlap_grad_reduce = true;  // buckets of --ddp-bucket-size
  ddp.bucket_size = 150;           // several buckets, shards ending inside matrices
  std::vector<LayoutParam> sizes;
  for (const Shape& s : shapes) sizes.push_back({s.numel()});
  const DdpBufferLayout layout = ddp_buffer_layout(sizes, ddp);
  ASSERT_GT(layout.buckets.size(), 1u);
  std::vector<HostTensor> values, grads, ref_values, ref_grads;
  for (size_t k = 0; k < shapes.size(); ++k) {
    values.push_back(randn(shapes[k], 300 + k));
    grads.push_back(randn(shapes[k], 400 + k));
  }
  ref_values = values;
  ref_grads = grads;
  std::vector<Param> params, ref_params;
  for (size_t k = 0; k < shapes.size(); ++k) {
    const Matrix m{k == 1 ? "decoder.layers.0.mlp.linear_fc1.bias" : "decoder.layers.0.mlp.linear_fc1.weight",
                   shapes[k], {-1, 1}};
    params.push_back(make_param(m, values[k], grads[k], 1, 0));
    params.back().weight_decay = k != 1;
    params.back().buffer_offset = layout.params[k].start;
    ref_params.push_back(make_param(m, ref_values[k], ref_grads[k], 1, 0));
    ref_params.back().weight_decay = k != 1;
  }
  MuonSetup setup;
  Optimizer sharded(params, cpu_backend(), nullptr, nullptr, {&layout, &dp}, &setup);
  Optimizer reference(ref_params, cpu_backend(), nullptr, nullptr, {}, &setup);
  OptimizerConfig oc;
  for (int step = 0; step < 2; ++step) {
    sharded.step(oc, 0.02f, 0.1f);
    reference.step(oc, 0.02f, 0.1f);
  }
  int64_t compared = 0;
  for (const DdpBucket& bucket : layout.buckets) {
    const BufferRange mine = bucket.shard(dp.rank(), dp.size());
    for (int i : bucket.params) {
      const BufferRange at = layout.params[static_cast<size_t>(i)];
      for (int64_t e = std::max(at.start, mine.start); e < std::min(at.end, mine.end); ++e, ++compared)
        ASSERT_EQ(values[i].f32()[e - at.start], ref_values[i].f32()[e - at.start])
            << "parameter " << i << " element " << e - at.start << " on dp rank " << dp.rank();
    }
  }
  double total = static_cast<double>(compared);  // some rank's shard may be all padding
  dp.all_reduce(TensorView(&total, DType::f64, {1}), ReduceOp::sum);
  EXPECT_EQ(total, 117 + 13 + 105 + 36) << "every element is some rank's";
}

// Training with Muon reproduces the single-rank loss curve under tp + sp and, on 4 ranks, tp x dp
// with the distributed optimizer.
TEST(Muon, TrainingFollowsTheSingleRankCurve) {
  TrainConfig run = short_run();
  run.optimizer.muon = MuonConfig{};
  run.optimizer.muon->bf16_iteration = false;  // f32: only the order of sums differs
  run.use_distributed_optimizer = world().size() > 2;
  expect_same_curve(llama_style(), 2, true, run);
}

}  // namespace
}  // namespace mt::test
