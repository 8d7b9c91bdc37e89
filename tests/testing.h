// Shared helpers for the test tiers: temporary directories, owned host tensors, deterministic
// random fills, max-difference comparisons, a check that an mt::Error names what it should, and a
// central finite-difference gradient checker.
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "base/rng.h"
#include "model/config.h"
#include "tensor/tensor.h"

namespace mt::test {

// A whole file's bytes.
inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A fresh directory under the system temp dir, removed with its contents at scope exit.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("mt_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string path() const { return path_.string(); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string write(const std::string& name, std::string_view content) const {
    const std::string p = file(name);
    std::ofstream(p, std::ios::binary) << content;
    return p;
  }

 private:
  std::filesystem::path path_;
};


// A host tensor that owns its bytes; view() hands out a TensorView of them.
struct HostTensor {
  std::vector<uint8_t> bytes;
  DType dtype = DType::f32;
  Shape shape;

  HostTensor() = default;
  HostTensor(DType t, Shape s) : bytes(static_cast<size_t>(s.numel()) * dtype_size(t)), dtype(t), shape(s) {}
  TensorView view() { return TensorView(bytes.data(), dtype, shape); }
  float* f32() { return view().f32(); }
  int32_t* i32() { return view().i32(); }
  uint8_t* u8() { return view().u8(); }
  int64_t numel() const { return shape.numel(); }
};

// N(0, std) values, deterministic in `seed`.
inline HostTensor randn(Shape s, uint64_t seed, float std = 1.0f) {
  HostTensor t(DType::f32, s);
  RngStream rng{seed, 0x7e57};
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = std * rng.normal(static_cast<uint64_t>(i));
  return t;
}

inline HostTensor zeros(Shape s, DType dtype = DType::f32) { return HostTensor(dtype, s); }

// Integers uniform in [0, high), deterministic in `seed`.
inline HostTensor randint(Shape s, int32_t high, uint64_t seed) {
  HostTensor t(DType::i32, s);
  RngStream rng{seed, 0x1d5};
  for (int64_t i = 0; i < t.numel(); ++i)
    t.i32()[i] = static_cast<int32_t>(rng.uniform(static_cast<uint64_t>(i)) * static_cast<float>(high)) % high;
  return t;
}

inline std::vector<double> to_double(HostTensor& t) {
  std::vector<double> out(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) out[i] = t.f32()[i];
  return out;
}

// Max |a − b| / (atol + rtol·|b|) over elements; the check passes when this is <= 1.
// Prints the worst element so a failure says where.
inline void expect_close(const float* actual, const double* expected, int64_t n, double atol, double rtol,
                         const char* what) {
  double worst = 0.0, worst_abs = 0.0;
  int64_t at = -1;
  for (int64_t i = 0; i < n; ++i) {
    const double diff = std::fabs(static_cast<double>(actual[i]) - expected[i]);
    // Equal values pass whatever the tolerance (atol = rtol = 0 asks for equality: no 0/0, and
    // inf = inf), and so does NaN where the reference is NaN.
    const bool same = static_cast<double>(actual[i]) == expected[i] || (std::isnan(actual[i]) && std::isnan(expected[i]));
    const double ratio = same ? 0.0 : diff / (atol + rtol * std::fabs(expected[i]));
    if (!(ratio <= worst)) {  // also catches NaN
      worst = std::isnan(ratio) ? INFINITY : ratio;
      worst_abs = diff;
      at = i;
    }
  }
  EXPECT_LE(worst, 1.0) << what << ": worst element " << at << " actual " << (at >= 0 ? actual[at] : 0.0f)
                        << " expected " << (at >= 0 ? expected[at] : 0.0) << " |diff| " << worst_abs
                        << " (atol " << atol << ", rtol " << rtol << ")";
}

inline void expect_close(const float* actual, const std::vector<double>& expected, double atol, double rtol,
                         const char* what) {
  expect_close(actual, expected.data(), static_cast<int64_t>(expected.size()), atol, rtol, what);
}

// Runs f, expects mt::Error, and checks the message names what it should (the value, the limit, the fix).
// Returns whether f threw, so a test can skip what would only make sense (or hang) after the error.
template <typename F>
bool expect_error_mentioning(F&& f, const std::string& needle) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    return true;
  }
  ADD_FAILURE() << "no mt::Error thrown (expected one mentioning '" << needle << "')";
  return false;
}

// Central finite differences of a scalar function of `x` (f32, perturbed in place), evaluated in
// double by `loss`.  Returns d loss / d x[i] for every i (or for the indices in `only`, others 0).
inline std::vector<double> finite_difference(HostTensor& x, const std::function<double()>& loss, double h = 1e-2,
                                             const std::vector<int64_t>& only = {}) {
  std::vector<double> grad(static_cast<size_t>(x.numel()), 0.0);
  auto probe = [&](int64_t i) {
    float* p = x.f32() + i;
    const float saved = *p;
    *p = static_cast<float>(saved + h);
    const double up = loss();
    *p = static_cast<float>(saved - h);
    const double down = loss();
    *p = saved;
    grad[i] = (up - down) / (2.0 * h);
  };
  if (only.empty())
    for (int64_t i = 0; i < x.numel(); ++i) probe(i);
  else
    for (int64_t i : only) probe(i);
  return grad;
}

// Σ out[i]·w[i] with fixed random weights w: a scalar loss whose gradient w.r.t. out is w,
// used to drive backward passes in op tests.
inline double weighted_sum(const float* out, const float* w, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(out[i]) * w[i];
  return s;
}

// A tiny GPT-2 style (LayerNorm, GELU, learned positions) or Llama style (RMSNorm, SwiGLU, RoPE,
// grouped queries, no biases, untied output) model with dropout on and a large init std, so that
// every path carries gradient: for whole-model gradient checks.
inline ModelConfig tiny_gpt(bool llama, int64_t seq_length, AttentionImpl impl = AttentionImpl::flash) {
  ModelConfig c;
  c.num_layers = 2;
  c.hidden_size = 24;
  c.num_attention_heads = 4;
  c.seq_length = seq_length;
  c.vocab_size = 37;
  c.make_vocab_size_divisible_by = 8;
  c.hidden_dropout = 0.1f;
  c.attention_dropout = 0.1f;
  c.init_method_std = 0.2f;
  c.attention_impl = impl;
  if (llama) {
    c.num_query_groups = 2;
    c.normalization = Normalization::rmsnorm;
    c.activation = Activation::swiglu;
    c.ffn_hidden_size = 40;
    c.position_embedding_type = PositionEmbedding::rope;
    c.add_bias_linear = false;
    c.untie_embeddings_and_output_weights = true;
  } else {
    c.activation = Activation::gelu;
    c.ffn_hidden_size = 48;
  }
  c.finalize();
  return c;
}

// NullTokenizer text: token ids written as space-separated integers, and back.
inline std::string ids_text(const std::vector<int32_t>& ids) {
  std::string s;
  for (const int32_t t : ids) s += (s.empty() ? "" : " ") + std::to_string(t);
  return s;
}
inline std::vector<int32_t> text_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::istringstream in(text);
  for (int32_t t; in >> t;) ids.push_back(t);
  return ids;
}

}  // namespace mt::test
