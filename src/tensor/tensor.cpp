#include "tensor/tensor.h"

namespace mt {

Shape::Shape(std::initializer_list<int64_t> list) {
  MT_CHECK(list.size() <= kMaxDims) << "at most " << kMaxDims << " dimensions";
  for (int64_t d : list) {
    MT_CHECK(d >= 0) << "negative dimension " << d;
    dims[ndim++] = d;
  }
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= dims[i];
  return n;
}

bool Shape::operator==(const Shape& other) const {
  if (ndim != other.ndim) return false;
  for (int i = 0; i < ndim; ++i)
    if (dims[i] != other.dims[i]) return false;
  return true;
}

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < ndim; ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

TensorView TensorView::reshape(Shape s) const {
  MT_CHECK(s.numel() == numel()) << "cannot reshape " << str() << " to " << s.str();
  TensorView t = *this;
  t.shape = s;
  return t;
}

TensorView TensorView::rows(int64_t begin, int64_t count) const {
  MT_CHECK(ndim() >= 1 && begin >= 0 && count >= 0 && begin + count <= dim(0))
      << "rows [" << begin << ", " << begin + count << ") out of range for " << str();
  TensorView t = *this;
  const size_t row_bytes = dim(0) ? bytes() / static_cast<size_t>(dim(0)) : 0;
  t.data = static_cast<char*>(data) + static_cast<size_t>(begin) * row_bytes;
  t.shape.dims[0] = count;
  return t;
}

const char* device_name(Device device) {
  switch (device) {
    case Device::cpu: return "cpu";
    case Device::cuda: return "cuda";
    case Device::guard: return "guard";
  }
  return "unknown";
}

std::string TensorView::str() const { return std::string(dtype_name(dtype)) + shape.str(); }

void check_shape(const TensorView& t, const Shape& expected, const char* op, const char* name) {
  MT_CHECK(t.shape == expected) << op << ": " << name << " is " << t.str() << ", expected " << expected.str();
}

void check_dtype(const TensorView& t, DType expected, const char* op, const char* name) {
  MT_CHECK(t.dtype == expected) << op << ": " << name << " is " << t.str() << ", expected dtype "
                                << dtype_name(expected);
}

void check_same_device(std::initializer_list<TensorView> tensors, const char* op) {
  const TensorView* first = nullptr;
  for (const TensorView& t : tensors) {
    if (t.empty()) continue;
    if (!first) first = &t;
    MT_CHECK(t.device == first->device) << op << ": tensors live on different devices";
  }
}

}  // namespace mt
