// The GEMM descriptors the CUDA backend hands to cuBLASLt, executed by a reference loop, equal
// the CPU linear op: forward with and without bias, and both backward products (accumulating).
#include "backend/gemm.h"
#include "ops/linear.h"
#include "testing.h"

namespace mt::test {
namespace {

struct LinearTensors {
  HostTensor inp, weight, bias, dout;
  const float* operand(GemmOperand o) {
    switch (o) {
      case GemmOperand::inp: return inp.f32();
      case GemmOperand::weight: return weight.f32();
      case GemmOperand::dout: return dout.f32();
    }
    return nullptr;
  }
};

void expect_gemm_matches(const GemmDesc& d, LinearTensors& t, HostTensor start, HostTensor& want, const char* what) {
  gemm_reference(d, t.operand(d.a), t.operand(d.b), t.bias.f32(), start.f32());
  expect_close(start.f32(), to_double(want), 1e-5, 1e-5, what);
}

TEST(GemmDesc, LinearProductsEqualTheCpuOp) {
  for (auto [n, in, out] : {std::tuple{5, 7, 3}, std::tuple{1, 16, 9}, std::tuple{33, 20, 48}}) {
    LinearTensors t{randn({n, in}, 1), randn({out, in}, 2), randn({out}, 3), randn({n, out}, 4)};
    for (bool bias : {false, true}) {
      HostTensor y = zeros({n, out});
      linear_fwd(y.view(), t.inp.view(), t.weight.view(), bias ? t.bias.view() : TensorView());
      expect_gemm_matches(linear_fwd_gemm(n, in, out, bias), t, randn({n, out}, 9), y, "forward");
    }
    // The backward accumulates: both sides start from the same nonzero gradients.
    HostTensor dinp = randn({n, in}, 5), dweight = randn({out, in}, 6);
    const HostTensor dinp0 = dinp, dweight0 = dweight;
    linear_bwd(dinp.view(), dweight.view(), TensorView(), t.dout.view(), t.inp.view(), t.weight.view());
    expect_gemm_matches(linear_dinp_gemm(n, in, out), t, dinp0, dinp, "dinp");
    expect_gemm_matches(linear_dweight_gemm(n, in, out), t, dweight0, dweight, "dweight");
  }
}

// A model's activation dtype says what its GEMMs' operands hold for as long as its scope runs.
TEST(GemmDesc, InputsFollowTheActivationDtypeForAScope) {
  EXPECT_EQ(gemm_inputs(), GemmInputs::f32);
  {
    const GemmInputsScope bf16(DType::bf16);
    EXPECT_EQ(gemm_inputs(), GemmInputs::bf16);
    {
      const GemmInputsScope f16(DType::f16);
      EXPECT_EQ(gemm_inputs(), GemmInputs::f16);
    }
    EXPECT_EQ(gemm_inputs(), GemmInputs::bf16);
    const GemmInputsScope f32(DType::f32);
    EXPECT_EQ(gemm_inputs(), GemmInputs::f32);
  }
  EXPECT_EQ(gemm_inputs(), GemmInputs::f32);
}

}  // namespace
}  // namespace mt::test
