// A borrowed view of any array that implements __dlpack__, valid while the view lives; the one
// typed-view helper that checks an argument against its contract; the overlap check of the
// arrays an op writes; and the one way compute runs (GIL released, on the array's device).
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "fastfair/common.h"

namespace fastfair::binding {

namespace py = pybind11;

enum class Device { cpu, cuda };

struct ArrayView {
  py::object capsule;  // keeps the producer's memory alive; its destructor frees the export
  std::string name;    // what errors call the array (the caller's argument name)
  void* data = nullptr;
  Device device = Device::cpu;
  int device_id = 0;
  DType dtype = DType::f32;
  int dlpack_code = 0, dlpack_bits = 0;
  bool is_float = false;  // one of fastfair's four float dtypes
  bool read_only = false;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // in elements, always filled; C-contiguous when numel() == 0

  int64_t numel() const;
  int ndim() const { return static_cast<int>(shape.size()); }
  // True when the trailing `dims` axes are C-contiguous (so one pointer addresses them as a run),
  // or address nothing (one of them has length 0).
  bool inner_contiguous(int dims) const;
  std::string dtype_str() const;
  std::string device_str() const;
  template <typename T>
  T* as() const { return static_cast<T*>(data); }
};

// Exports `obj` through `obj.__dlpack__` (torch tensors through their attributes). `stream` is
// the consumer stream handed to CUDA producers (-1: none). Errors name `name` and say the fix:
// sparse and meta tensors, non-native byte order, devices other than CPU and CUDA.
ArrayView view(py::handle obj, const std::string& name, int64_t stream);

// Element types, as bits of a set (Spec::dtype).
enum Elem : unsigned {
  kF32 = 1u << 0, kF64 = 1u << 1, kF16 = 1u << 2, kBF16 = 1u << 3,
  kBool = 1u << 4, kU8 = 1u << 5, kU64 = 1u << 6, kI64 = 1u << 7,
};
constexpr unsigned kAnyFloat = kF32 | kF64 | kF16 | kBF16;
constexpr unsigned kF32or64 = kF32 | kF64;
constexpr unsigned kByte = kBool | kU8;  // masks

// An argument's contract, checked by `typed` in a fixed order (device, dtype, shape, layout,
// writability); each failure raises ValueError naming the argument and the fix. Built by chaining:
//   typed(b, "b", Spec().dtype(kF64).shape({K}, "[K]").on(H), stream)
class Spec {
 public:
  Spec& dtype(unsigned elems) { dtypes_ = elems; return *this; }
  // Exactly these extents; -1 matches any. `symbols` (e.g. "[m, M]") is what errors show, with
  // the numbers after it when every extent is known.
  Spec& shape(std::vector<int64_t> dims, std::string symbols = {}) {
    dims_ = std::move(dims);
    has_shape_ = true;
    symbols_ = std::move(symbols);
    return *this;
  }
  // Only the trailing `axes` axes must be C-contiguous (the leading ones may be strided): rows
  // that one pointer and one stride address. Default: all axes.
  Spec& rows(int axes) { contiguous_axes_ = axes; return *this; }
  Spec& writable() { writable_ = true; return *this; }
  // On `ref`'s device (ref.name in errors). Without it the array is where the op runs, so a
  // CUDA array needs a CUDA build.
  Spec& on(const ArrayView& ref) { device_of_ = &ref; return *this; }
  // A CPU array only; `why` ends the error ("this solver runs on the host").
  Spec& cpu(std::string why) { cpu_only_ = std::move(why); return *this; }

  void check(const ArrayView& v) const;

 private:
  unsigned dtypes_ = 0;  // 0: any
  std::vector<int64_t> dims_;
  bool has_shape_ = false;
  std::string symbols_;
  int contiguous_axes_ = -1;  // -1: all
  bool writable_ = false;
  const ArrayView* device_of_ = nullptr;
  std::string cpu_only_;
};

// The typed view of one argument: view(obj, name, stream), then spec.check.
ArrayView typed(py::handle obj, const std::string& name, const Spec& spec, int64_t stream = -1);

// The checks a Spec is made of, for arguments whose contract depends on another argument (the
// running sum's dtype, an output that mirrors an input); each raises ValueError naming `a.name`.
void require_float(const ArrayView& a);
void require_writable(const ArrayView& a);
void require_same_device(const ArrayView& a, const ArrayView& ref);
void require_same_dtype(const ArrayView& a, const ArrayView& ref);
void require_contiguous(const ArrayView& a);
void require_cuda_built(const ArrayView& a);

// Refuses memory shared between an array an op writes and any other array of the call:
// ValueError "<written> overlaps <other>; pass a separate buffer", before anything is written.
// Exact for arrays whose rows are contiguous runs at a fixed stride (every array fastfair reads);
// other layouts are compared by the span of memory they reach. Null entries and arrays without
// elements are skipped. `in_place` is the one (written, read) pair that may be the very same array
// (same address, shape, strides and dtype): the op's documented in-place use.
struct InPlace {
  const ArrayView* out = nullptr;
  const ArrayView* in = nullptr;
};
void require_disjoint(const std::vector<const ArrayView*>& writes,
                      const std::vector<const ArrayView*>& reads, InPlace in_place = {});

// Makes the array's GPU the current CUDA device for its lifetime (a no-op for CPU arrays and in
// builds without CUDA), so kernels launch where the data lives.
class DeviceGuard {
 public:
  explicit DeviceGuard(const ArrayView& a);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// Raises the Python exception for a failed kernel status: RuntimeError, or ValueError where the
// kernel's failures are about the input values (CPU kernels that check their data).
void throw_if_failed(const Status& s);
void throw_value_error_if_failed(const Status& s);

// Runs fn() with the GIL released, as all compute does, and returns what it returns. fn must not
// touch Python objects; the errors it throws propagate with the GIL taken back while unwinding.
template <typename Fn>
decltype(auto) released(Fn&& fn) {
  py::gil_scoped_release release;
  return fn();
}

// Runs an op where `ref` lives, released() and with ref's GPU current: on_cpu() for host arrays,
// on_cuda(stream) for CUDA arrays (never called in builds without CUDA, which refuse CUDA arrays
// earlier). Each callable raises its own errors.
template <typename OnCpu, typename OnCuda>
void run_on_device(const ArrayView& ref, [[maybe_unused]] int64_t stream, OnCpu&& on_cpu,
                   [[maybe_unused]] OnCuda&& on_cuda) {
  DeviceGuard guard(ref);
  released([&] {
    if (ref.device == Device::cpu) {
      on_cpu();
      return;
    }
#ifdef FASTFAIR_WITH_CUDA
    on_cuda(reinterpret_cast<void*>(stream));
#endif
  });
}

}  // namespace fastfair::binding
