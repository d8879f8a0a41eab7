// Helpers shared by fastfair's CUDA kernels.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <mutex>
#include <string>

#include "fastfair/common.h"

namespace fastfair::cuda_detail {

inline Status check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::success();
  return Status::error(std::string(what) + ": " + cudaGetErrorString(err));
}

// Kernel argument tables (pointer lists, tile lists) live in mapped pinned host memory that the
// kernel reads directly, so a launch needs neither a device allocation nor a synchronising copy.
// A ring of slabs, each guarded by an event, lets several launches be in flight; a slab is
// rewritten only after the kernel that read it has finished.
class HostTableRing {
 public:
  struct Lease {
    void* host = nullptr;    // at least the requested bytes, safe to overwrite
    void* device = nullptr;  // the same memory as the kernel sees it
    int slot = -1;
  };
  Status acquire(size_t bytes, Lease* lease);
  // Marks the leased slab as read by the work queued so far on `stream`.
  Status release(const Lease& lease, cudaStream_t stream);

 private:
  static constexpr int kSlabs = 16;
  struct Slab {
    void* host = nullptr;
    size_t bytes = 0;
    cudaEvent_t done = nullptr;
  };
  Slab slabs_[kSlabs];
  int next_ = 0;
  std::mutex mu_;
};

// One ring per process and device.
HostTableRing& table_ring();

}  // namespace fastfair::cuda_detail
