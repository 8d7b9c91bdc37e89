// Device cases of ops/embedding.h against the CPU backend: the lookup with and without a position
// table, with implicit and explicit positions, whole and vocab-sharded tables; the backward's
// accumulation of repeated ids (the device sums each column in the CPU's token order, so it must
// match bit for bit on CUDA too); the out-of-range id errors.
#include "device_testing.h"
#include "ops/embedding.h"

namespace mt::test {
namespace {

struct Case {
  int64_t b, s, v, p, h;
  bool with_pos, explicit_pos;
  VocabShard shard;  // rows [start, start + v) of a vocabulary of total ids (total 0: the whole table)
};
// h not a multiple of 32 or of the block size; few ids (many repeats) and many; a shard in the
// middle of the vocabulary, where other shards' ids give zero rows and no gradient.
const Case kCases[] = {
    {1, 1, 1, 1, 1, false, false, {}},    {3, 5, 11, 8, 37, true, false, {}},
    {3, 5, 11, 8, 37, false, false, {}},  {3, 5, 11, 8, 37, true, true, {}},
    {2, 7, 4, 16, 300, true, true, {}},   {4, 64, 1000, 64, 65, true, false, {}},
    {3, 9, 6, 9, 33, true, true, {4, 20}}, {8, 16, 40, 16, 257, false, false, {40, 120}},
};

std::string name(const Case& c) {
  return "b " + std::to_string(c.b) + ", s " + std::to_string(c.s) + ", v " + std::to_string(c.v) + ", h " +
         std::to_string(c.h) + (c.with_pos ? (c.explicit_pos ? ", explicit positions" : ", positions") : "") +
         (c.shard.total ? ", shard at " + std::to_string(c.shard.start) : "");
}

TEST(DeviceEmbedding, ForwardAndBackward) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(name(c));
    DeviceCase dev;
    const int32_t vocab = static_cast<int32_t>(c.shard.total ? c.shard.total : c.v);
    HostTensor tokens = randint({c.b, c.s}, vocab, 1), positions = randint({c.b, c.s}, int32_t(c.p), 2);
    HostTensor word = randn({c.v, c.h}, 3), pos = randn({c.p, c.h}, 4), out = zeros({c.s, c.b, c.h});
    const TensorView tokens_dev = dev.upload(tokens), word_dev = dev.upload(word);
    const TensorView pos_host = c.with_pos ? pos.view() : TensorView();
    const TensorView pos_dev = c.with_pos ? dev.upload(pos) : TensorView();
    const TensorView positions_host = c.explicit_pos ? positions.view() : TensorView();
    const TensorView positions_dev = c.explicit_pos ? dev.upload(positions) : TensorView();
    const TensorView out_dev = dev.poisoned(DType::f32, {c.s, c.b, c.h});
    embedding_fwd(out.view(), tokens.view(), positions_host, word.view(), pos_host, c.shard);
    embedding_fwd(out_dev, tokens_dev, positions_dev, word_dev, pos_dev, c.shard);
    dev.expect_matches(out_dev, out, 0, 0, "embedding_fwd");  // a copy and at most one add: exact

    HostTensor dout = randn({c.s, c.b, c.h}, 5), dword = randn({c.v, c.h}, 6), dpos = randn({c.p, c.h}, 7);
    const TensorView dword_dev = dev.upload(dword), dpos_dev = c.with_pos ? dev.upload(dpos) : TensorView();
    embedding_bwd(dword.view(), c.with_pos ? dpos.view() : TensorView(), dout.view(), tokens.view(), positions_host,
                  c.shard);
    embedding_bwd(dword_dev, dpos_dev, dev.upload(dout), tokens_dev, positions_dev, c.shard);
    dev.expect_matches(dword_dev, dword, 0, 0, "embedding_bwd dword");  // the CPU's order: exact
    if (c.with_pos) dev.expect_matches(dpos_dev, dpos, 0, 0, "embedding_bwd dpos_table");
  }
}

TEST(DeviceEmbedding, OutOfRangeIdsThrowNamingThem) {
  const int64_t b = 2, s = 3, v = 5, p = 4, h = 8;
  DeviceCase dev;
  HostTensor tokens = randint({b, s}, int32_t(v), 11), positions = randint({b, s}, int32_t(p), 12);
  const TensorView word = dev.upload(randn({v, h}, 13).view()), pos = dev.upload(randn({p, h}, 14).view());
  const TensorView out = dev.poisoned(DType::f32, {s, b, h}), dout = dev.upload(randn({s, b, h}, 15).view());
  const TensorView dword = dev.upload(zeros({v, h}).view()), dpos = dev.upload(zeros({p, h}).view());
  tokens.i32()[1 * s + 2] = 5;  // tokens[1, 2] = V
  TensorView tokens_dev = dev.upload(tokens), positions_dev = dev.upload(positions);
  expect_error_mentioning([&] { embedding_fwd(out, tokens_dev, TensorView(), word, pos); }, "tokens[1, 2] = 5");
  expect_error_mentioning([&] { embedding_bwd(dword, dpos, dout, tokens_dev, TensorView()); }, "tokens[1, 2] = 5");
  tokens.i32()[1 * s + 2] = -1;
  tokens_dev = dev.upload(tokens);
  expect_error_mentioning([&] { embedding_fwd(out, tokens_dev, TensorView(), word, pos); }, "tokens[1, 2] = -1");
  tokens.i32()[1 * s + 2] = 0;
  positions.i32()[0 * s + 1] = 4;  // positions[0, 1] = P
  positions.i32()[1 * s + 0] = 9;  // a later offender: the first one is named
  tokens_dev = dev.upload(tokens);
  positions_dev = dev.upload(positions);
  expect_error_mentioning([&] { embedding_fwd(out, tokens_dev, positions_dev, word, pos); }, "positions[0, 1] = 4");
  expect_error_mentioning([&] { embedding_bwd(dword, dpos, dout, tokens_dev, positions_dev); },
                          "positions[0, 1] = 4");
}

}  // namespace
}  // namespace mt::test
