#include "cuda_utils.h"

#include <map>
#include <memory>

namespace fastfair::cuda_detail {

Status HostTableRing::acquire(size_t bytes, Lease* lease) {
  std::lock_guard<std::mutex> lock(mu_);
  const int slot = next_;
  Slab& s = slabs_[slot];
  if (s.done == nullptr) {
    Status st = check(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming), "cudaEventCreate");
    if (!st.ok) return st;
  } else {
    // Usually long complete; blocks only when kSlabs launches are still queued.
    Status st = check(cudaEventSynchronize(s.done), "cudaEventSynchronize");
    if (!st.ok) return st;
  }
  if (s.bytes < bytes) {
    if (s.host != nullptr) cudaFreeHost(s.host);
    s.host = nullptr;
    s.bytes = 0;
    size_t grown = 4096;
    while (grown < bytes) grown *= 2;
    Status st = check(cudaHostAlloc(&s.host, grown, cudaHostAllocMapped | cudaHostAllocPortable),
                      "cudaHostAlloc");
    if (!st.ok) return st;
    s.bytes = grown;
  }
  Status st = check(cudaHostGetDevicePointer(&lease->device, s.host, 0), "cudaHostGetDevicePointer");
  if (!st.ok) return st;
  lease->host = s.host;
  lease->slot = slot;
  next_ = (next_ + 1) % kSlabs;
  return Status::success();
}

Status HostTableRing::release(const Lease& lease, cudaStream_t stream) {
  if (lease.slot < 0) return Status::success();
  return check(cudaEventRecord(slabs_[lease.slot].done, stream), "cudaEventRecord");
}

HostTableRing& table_ring() {
  static std::mutex mu;
  static std::map<int, std::unique_ptr<HostTableRing>> rings;
  int device = 0;
  cudaGetDevice(&device);
  std::lock_guard<std::mutex> lock(mu);
  auto& ring = rings[device];
  if (!ring) ring = std::make_unique<HostTableRing>();
  return *ring;
}

}  // namespace fastfair::cuda_detail
