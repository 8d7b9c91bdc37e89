// CUDA entry points of ops/adamw.h: tensor lists to by-value batches for the kernels of adamw.cu,
// and the sums of squares reduced on the device into reduction_scratch(), read back once per call
// (or once per kSumsPerCopy tensors).
#include "backend/cuda/kernels/adamw.h"
#include "backend/cuda/ops.h"
#include "backend/cuda/runtime.h"

namespace mt::cuda {

namespace {

// reduction_scratch(): per-tensor sums first, then the partials of the batch in flight.
constexpr int kSumsPerCopy = 1024;
constexpr int kPartials = kReductionScratchDoubles - kSumsPerCopy;

AdamWConsts consts_of(const AdamWParams& p, float weight_decay) {
  return adamw_consts(p.lr, p.beta1, p.beta2, p.eps, p.step, p.grad_unscale, p.grad_clip, weight_decay);
}

int copy_code(const TensorView& copy) {
  if (copy.data == nullptr) return 0;
  return copy.dtype == DType::bf16 ? 1 : 2;  // the op admits only bf16 and f16
}

}  // namespace

void adamw_update_multi(std::span<const AdamWTensor> tensors, const AdamWParams& params) {
  k::AdamWBatch batch;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const AdamWTensor& t = tensors[i];
    batch.t[batch.count++] = k::AdamWSlot{t.param.f32(), t.grad.f32(), t.m.f32(), t.v.f32(), t.model_copy.data,
                                          copy_code(t.model_copy), t.param.numel(), consts_of(params, t.weight_decay)};
    if (batch.count == k::kAdamWSlots || i + 1 == tensors.size()) {
      k::adamw(batch, stream());
      check_launch("adamw_update_multi");
      batch.count = 0;
    }
  }
}

void adamw_update(const TensorView& param, const TensorView& grad, const TensorView& m, const TensorView& v,
                  const AdamWParams& params, const TensorView& model_copy) {
  const AdamWTensor t{param, grad, m, v, model_copy, params.weight_decay};
  adamw_update_multi(std::span<const AdamWTensor>(&t, 1), params);
}

void unscaled_sum_squares_multi(std::span<const TensorView> grads, float unscale, std::span<double>,
                                std::span<double> sums) {
  double* const device_sums = reduction_scratch();
  double* const partial = device_sums + kSumsPerCopy;
  size_t copied = 0;  // sums[0, copied) are on the host
  int in_sums = 0;    // device_sums[0, in_sums) wait for the copy
  k::SumSquaresBatch batch;
  int blocks = 0;
  const auto launch = [&] {
    k::unscaled_sum_squares(device_sums + in_sums, partial, batch, unscale, stream());
    check_launch("unscaled_sum_squares_multi");
    in_sums += batch.count;
    batch.count = 0;
    blocks = 0;
  };
  const auto copy_back = [&] {
    MT_CUDA_CHECK(cudaMemcpyAsync(sums.data() + copied, device_sums, in_sums * sizeof(double), cudaMemcpyDeviceToHost,
                                  stream()));
    MT_CUDA_CHECK(cudaStreamSynchronize(stream()));
    copied += in_sums;
    in_sums = 0;
  };
  for (const TensorView& g : grads) {
    const int b = k::sum_squares_blocks_of(g.numel());
    if (batch.count == k::kSumSquaresSlots || blocks + b > kPartials) launch();
    if (in_sums + batch.count == kSumsPerCopy) {
      if (batch.count > 0) launch();
      copy_back();
    }
    batch.x[batch.count] = g.f32();
    batch.n[batch.count++] = g.numel();
    blocks += b;
  }
  if (batch.count > 0) launch();
  if (in_sums > 0) copy_back();
}

double unscaled_sum_squares(const TensorView& grad, float unscale) {
  double sum = 0.0;
  unscaled_sum_squares_multi(std::span<const TensorView>(&grad, 1), unscale, {}, std::span<double>(&sum, 1));
  return sum;
}

// The host scratch of unscaled_sum_squares_multi: none, the partials stay on the device.
int64_t sum_squares_chunks(int64_t) { return 0; }

}  // namespace mt::cuda
