// Each tensor-parallel layer against its unsharded reference, for the job's size t (2 and 4 under
// CTest), with and without sequence parallelism: outputs and every gradient. Whole tensors are
// built identically on every rank; each rank checks its own shard of the reference result.
#include "model/gpt.h"
#include "ops/cross_entropy.h"
#include "ops/embedding.h"
#include "ops/linear.h"
#include "parallel/layers.h"
#include "parallel_testing.h"

namespace mt::test {
namespace {

constexpr int64_t kSeq = 64, kBatch = 2, kRows = kSeq * kBatch, kIn = 128, kOut = 256;
constexpr double kTol = 2e-5;

struct Layout {
  bool sp;
  const char* name;
};
const Layout kLayouts[] = {{false, "tp"}, {true, "tp+sp"}};

TensorParallel tp(bool sp) { return TensorParallel{&world(), sp}; }

// Rows of the residual stream this rank sees: a row block under SP, everything otherwise.
HostTensor local_rows(HostTensor& full, bool sp) {
  return sp ? row_block(full, world().size(), world().rank()) : shard_of(full, ShardSpec{}, 1, 0);
}

struct LinearCase {
  HostTensor x = randn({kRows, kIn}, 1), w = randn({kOut, kIn}, 2, 0.1f), b = randn({kOut}, 3);
  HostTensor dout = randn({kRows, kOut}, 4);
  HostTensor out = zeros({kRows, kOut}), dx = zeros({kRows, kIn}), dw = zeros({kOut, kIn}), db = zeros({kOut});
  LinearCase() {
    linear_fwd(out.view(), x.view(), w.view(), b.view());
    linear_bwd(dx.view(), dw.view(), db.view(), dout.view(), x.view(), w.view());
  }
};

TEST(TpLayers, ColumnParallelLinearMatchesUnsharded) {
  const int t = world().size(), r = world().rank();
  LinearCase ref;
  for (const Layout& layout : kLayouts)
    for (int64_t blocks : {1, 2}) {  // 2: SwiGLU's fc1 (gate and up halves split separately)
      SCOPED_TRACE(std::string(layout.name) + " blocks " + std::to_string(blocks));
      const ShardSpec rows{0, blocks}, cols{1, blocks};
      HostTensor x = local_rows(ref.x, layout.sp), w = shard_of(ref.w, rows, t, r), b = shard_of(ref.b, rows, t, r);
      HostTensor out = zeros({kRows, kOut / t}), gathered = zeros({kRows, kIn}), partial = zeros({kRows, kIn});
      column_parallel_linear_fwd(tp(layout.sp), out.view(), x.view(), w.view(), b.view(), gathered.view());
      HostTensor out_ref = shard_of(ref.out, cols, t, r);
      expect_close(out, out_ref, kTol, kTol, "output");

      HostTensor dout = shard_of(ref.dout, cols, t, r), dx = zeros(x.shape), dw = zeros(w.shape), db = zeros(b.shape);
      column_parallel_linear_bwd(tp(layout.sp), dx.view(), dw.view(), db.view(), dout.view(), x.view(), w.view(),
                                 gathered.view(), partial.view());
      HostTensor dx_ref = local_rows(ref.dx, layout.sp), dw_ref = shard_of(ref.dw, rows, t, r),
                 db_ref = shard_of(ref.db, rows, t, r);
      expect_close(dx, dx_ref, kTol, kTol, "input gradient");
      expect_close(dw, dw_ref, kTol, kTol, "weight gradient");
      expect_close(db, db_ref, kTol, kTol, "bias gradient");
    }
}

TEST(TpLayers, RowParallelLinearMatchesUnsharded) {
  const int t = world().size(), r = world().rank();
  LinearCase ref;
  const ShardSpec cols{1, 1};
  for (const Layout& layout : kLayouts) {
    SCOPED_TRACE(layout.name);
    HostTensor x = shard_of(ref.x, cols, t, r), w = shard_of(ref.w, cols, t, r);
    HostTensor out = zeros({layout.sp ? kRows / t : kRows, kOut}), scratch = zeros({kRows, kOut});
    row_parallel_linear_fwd(tp(layout.sp), out.view(), x.view(), w.view(), ref.b.view(), scratch.view());
    HostTensor out_ref = local_rows(ref.out, layout.sp);
    expect_close(out, out_ref, kTol, kTol, "output");

    HostTensor dout = local_rows(ref.dout, layout.sp), dx = zeros(x.shape), dw = zeros(w.shape), db = zeros({kOut});
    row_parallel_linear_bwd(tp(layout.sp), dx.view(), dw.view(), db.view(), dout.view(), x.view(), w.view(),
                            scratch.view());
    HostTensor dx_ref = shard_of(ref.dx, cols, t, r), dw_ref = shard_of(ref.dw, cols, t, r);
    expect_close(dx, dx_ref, kTol, kTol, "input gradient");
    expect_close(dw, dw_ref, kTol, kTol, "weight gradient");
    expect_close(db, ref.db, kTol, kTol, "bias gradient (whole on every rank)");
  }
}

TEST(TpLayers, VocabParallelEmbeddingMatchesUnsharded) {
  const int t = world().size(), r = world().rank();
  const int64_t V = 512, h = kIn;
  HostTensor tokens = randint({kBatch, kSeq}, static_cast<int32_t>(V), 5);
  HostTensor word = randn({V, h}, 6), pos = randn({kSeq, h}, 7), dout = randn({kRows, h}, 8);
  HostTensor out_ref = zeros({kRows, h}), dword_ref = zeros({V, h}), dpos_ref = zeros({kSeq, h});
  embedding_fwd(out_ref.view().reshape({kSeq, kBatch, h}), tokens.view(), TensorView(), word.view(), pos.view());
  embedding_bwd(dword_ref.view(), dpos_ref.view(), dout.view().reshape({kSeq, kBatch, h}), tokens.view(), TensorView());
  const ShardSpec rows{0, 1};
  const VocabShard shard{r * (V / t), V};
  for (const Layout& layout : kLayouts) {
    SCOPED_TRACE(layout.name);
    HostTensor w = shard_of(word, rows, t, r), out = zeros({layout.sp ? kRows / t : kRows, h});
    HostTensor scratch = zeros({kRows, h});
    vocab_parallel_embedding_fwd(tp(layout.sp), out.view(), tokens.view(), w.view(), pos.view(), shard, scratch.view());
    HostTensor expected = local_rows(out_ref, layout.sp);
    expect_close(out, expected, 1e-6, 1e-6, "output");
    HostTensor d = local_rows(dout, layout.sp), dword = zeros({V / t, h}), dpos = zeros({kSeq, h});
    vocab_parallel_embedding_bwd(tp(layout.sp), dword.view(), dpos.view(), d.view(), tokens.view(), shard,
                                 scratch.view());
    HostTensor dword_expected = shard_of(dword_ref, rows, t, r);
    expect_close(dword, dword_expected, kTol, kTol, "word gradient");
    expect_close(dpos, dpos_ref, kTol, kTol, "position gradient (whole on every rank)");
  }
}

TEST(TpLayers, VocabParallelCrossEntropyMatchesUnsharded) {
  const int t = world().size(), r = world().rank();
  const int64_t V = 1024, rows = kRows;
  HostTensor logits = randn({rows, V}, 9, 3.0f), labels = randint({rows}, static_cast<int32_t>(V), 10);
  HostTensor dlosses = randn({rows}, 11);
  HostTensor losses_ref = zeros({rows}), lse_ref = zeros({rows}), dlogits_ref = zeros({rows, V});
  cross_entropy_fwd(losses_ref.view(), lse_ref.view(), logits.view(), labels.view());
  cross_entropy_bwd(dlogits_ref.view(), dlosses.view(), logits.view(), lse_ref.view(), labels.view());

  const ShardSpec cols{1, 1};
  HostTensor mine = shard_of(logits, cols, t, r), losses = zeros({rows}), lse = zeros({rows});
  HostTensor s1 = zeros({rows}), s2 = zeros({rows}), s3 = zeros({rows});
  const CrossEntropyScratch scratch{s1.view(), s2.view(), s3.view()};
  vocab_parallel_cross_entropy_fwd(tp(false), losses.view(), lse.view(), mine.view(), labels.view(), r * (V / t),
                                   scratch);
  expect_close(losses, losses_ref, 1e-5, 1e-5, "losses");
  expect_close(lse, lse_ref, 1e-5, 1e-5, "log-sum-exp");
  HostTensor dlogits = zeros(mine.shape);
  vocab_parallel_cross_entropy_bwd(tp(false), dlogits.view(), dlosses.view(), mine.view(), lse.view(), labels.view(),
                                   r * (V / t));
  HostTensor expected = shard_of(dlogits_ref, cols, t, r);
  expect_close(dlogits, expected, 1e-6, 1e-5, "logit gradient");
}

// No shard of the vocabulary-parallel cross entropy sees the whole vocabulary, so the model checks
// the labels itself, identically on every rank (all throw together, none waits in a collective).
TEST(TpLayers, OutOfRangeLabelsFailOnEveryRank) {
  ModelConfig c;
  c.num_layers = 1;
  c.hidden_size = 64;
  c.num_attention_heads = 4;
  c.seq_length = 16;
  c.vocab_size = 512;
  c.tensor_model_parallel_size = world().size();
  c.finalize();
  GptModelOptions options;
  options.tp_comm = &world();
  GptModel model(c, 1, cpu_backend(), nullptr, options);
  model.params().init(1);
  HostTensor tokens = randint({1, 16}, 512, 1), labels = randint({1, 16}, 512, 2);
  labels.i32()[5] = 512;
  ForwardOptions fo;
  EXPECT_THROW(model.forward({tokens.view(), labels.view(), TensorView()}, fo), Error);
  labels.i32()[5] = 7;
  EXPECT_NO_THROW(model.forward({tokens.view(), labels.view(), TensorView()}, fo));
}

}  // namespace
}  // namespace mt::test
