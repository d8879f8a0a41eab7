// Helpers shared by fastfair's CUDA kernels.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <initializer_list>
#include <mutex>
#include <string>

#include "fastfair/common.h"

namespace fastfair::cuda_detail {

inline Status check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::success();
  return Status::error(std::string(what) + ": " + cudaGetErrorString(err));
}

// Kernel argument tables (pointer lists, segment offsets, per-row scalars) are written into
// pinned host memory and copied, in stream order, into a stream-ordered device allocation: a launch
// neither synchronises nor makes its kernel read the table across PCIe. A ring of slabs, each
// guarded by an event, lets several launches be in flight; a slab is rewritten only after the copy
// that read it has finished.
class HostTableRing {
 public:
  static constexpr int kMaxParts = 6;
  struct Part {
    const void* data;  // host memory
    size_t bytes;
  };
  struct Lease {
    void* device = nullptr;           // the stream-ordered device allocation
    void* parts[kMaxParts] = {};      // each part's device address (16-byte aligned)
    int slot = -1;
  };
  // Copies `parts` into one pinned slab, then into a fresh device allocation on `stream`.
  Status stage(std::initializer_list<Part> parts, cudaStream_t stream, Lease* lease);
  // Frees the device copy after the work queued so far on `stream`; the slab is reusable then.
  Status release(const Lease& lease, cudaStream_t stream);

 private:
  static constexpr int kSlabs = 16;
  struct Slab {
    void* host = nullptr;
    size_t bytes = 0;
    cudaEvent_t done = nullptr;
  };
  Status acquire(size_t bytes, int* slot);
  Slab slabs_[kSlabs];
  int next_ = 0;
  std::mutex mu_;
};

// One ring per process and device.
HostTableRing& table_ring();

}  // namespace fastfair::cuda_detail
