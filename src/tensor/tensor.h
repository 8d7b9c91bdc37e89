// Owns TensorView: a non-owning, contiguous, row-major view {data, dtype, shape, device}.
// Ops take views; who owns the bytes (an arena, an mmap) is never the op's business.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "base/dtype.h"
#include "base/error.h"

namespace mt {

// cpu: host memory. cuda: an NVIDIA GPU's memory. guard: host memory that only backend calls may
// touch (backend/guard.h), so CPU-only tests catch host code reading a device tensor.
enum class Device : uint8_t { cpu, cuda, guard };
const char* device_name(Device device);

constexpr int kMaxDims = 5;

struct Shape {
  int ndim = 0;
  int64_t dims[kMaxDims] = {};

  Shape() = default;
  Shape(std::initializer_list<int64_t> list);

  int64_t numel() const;
  int64_t operator[](int i) const { return dims[i < 0 ? ndim + i : i]; }
  bool operator==(const Shape& other) const;
  std::string str() const;  // "[2, 3, 4]"
};

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::f32;
  Device device = Device::cpu;
  Shape shape;

  TensorView() = default;
  TensorView(void* d, DType t, Shape s, Device dev = Device::cpu) : data(d), dtype(t), device(dev), shape(s) {}

  bool empty() const { return data == nullptr; }
  int ndim() const { return shape.ndim; }
  int64_t dim(int i) const { return shape[i]; }
  int64_t numel() const { return shape.numel(); }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }

  // Typed element pointers; they check the dtype so a mix-up fails loudly.
  float* f32() const { return typed<float>(DType::f32); }
  uint16_t* bf16() const { return typed<uint16_t>(DType::bf16); }
  uint16_t* f16() const { return typed<uint16_t>(DType::f16); }
  int32_t* i32() const { return typed<int32_t>(DType::i32); }
  uint8_t* u8() const { return typed<uint8_t>(DType::u8); }

  // Same bytes, new shape (same numel).
  TensorView reshape(Shape s) const;
  // Rows [begin, begin + count) of the leading dimension.
  TensorView rows(int64_t begin, int64_t count) const;

  std::string str() const;  // "f32[2, 3]"

 private:
  template <typename T>
  T* typed(DType want) const {
    MT_CHECK(dtype == want) << "tensor is " << dtype_name(dtype) << ", expected " << dtype_name(want);
    return static_cast<T*>(data);
  }
};

// Shape checks for op entry points: "linear_fwd: weight is f32[3, 4], expected [3, 5]".
void check_shape(const TensorView& t, const Shape& expected, const char* op, const char* name);
void check_dtype(const TensorView& t, DType expected, const char* op, const char* name);
void check_same_device(std::initializer_list<TensorView> tensors, const char* op);

}  // namespace mt
