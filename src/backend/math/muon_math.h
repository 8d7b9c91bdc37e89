// Owns Muon's per-element arithmetic (DESIGN: "CUDA without a GPU"): the momentum step in
// torch's lerp form and the decoupled-decay update, in MT_HD pieces any backend's kernel calls.
#pragma once

#include "base/hd.h"

namespace mt {

// torch.lerp(start, end, w): start + w·(end − start) for w < 0.5, else end − (end − start)·(1 − w)
// (the form that is exact at both ends).
MT_HD inline float torch_lerp(float start, float end, float w) {
  return w < 0.5f ? start + w * (end - start) : end - (end - start) * (1.0f - w);
}

// g = fl(fl(grad · unscale) · clip) (as AdamW's); m.lerp_(g, 1 − β); the update's input is
// g.lerp(m, β) under Nesterov momentum, else m.
MT_HD inline float muon_momentum_step(float grad, float& m, float beta, bool nesterov, float unscale, float clip) {
  const float g = grad * unscale * clip;
  m = torch_lerp(m, g, 1.0f - beta);
  return nesterov ? torch_lerp(g, m, beta) : m;
}

// Decoupled weight decay, then the step: param·(1 − lr·wd) − lr·update.
MT_HD inline float muon_param(float param, float update, float decay, float lr) { return param * decay - lr * update; }

}  // namespace mt
