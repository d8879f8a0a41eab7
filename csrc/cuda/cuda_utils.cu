#include "cuda_utils.h"

#include <cstring>
#include <map>
#include <memory>

namespace fastfair::cuda_detail {

Status HostTableRing::acquire(size_t bytes, int* slot_out) {
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
    Status st = check(cudaHostAlloc(&s.host, grown, cudaHostAllocPortable), "cudaHostAlloc");
    if (!st.ok) return st;
    s.bytes = grown;
  }
  *slot_out = slot;
  next_ = (next_ + 1) % kSlabs;
  return Status::success();
}

Status HostTableRing::stage(std::initializer_list<Part> parts, cudaStream_t stream, Lease* lease) {
  if (parts.size() > size_t(kMaxParts)) return Status::error("too many table parts");
  size_t offsets[kMaxParts];
  size_t total = 0;
  int k = 0;
  for (const Part& p : parts) {
    offsets[k++] = total;
    total += (p.bytes + 15) / 16 * 16;
  }
  total = total > 0 ? total : 16;
  Status st = acquire(total, &lease->slot);
  if (!st.ok) return st;
  auto* host = static_cast<unsigned char*>(slabs_[lease->slot].host);
  k = 0;
  for (const Part& p : parts) std::memcpy(host + offsets[k++], p.data, p.bytes);
  st = check(cudaMallocAsync(&lease->device, total, stream), "cudaMallocAsync");
  if (st.ok)
    st = check(cudaMemcpyAsync(lease->device, host, total, cudaMemcpyHostToDevice, stream),
               "cudaMemcpyAsync");
  if (!st.ok) {
    release(*lease, stream);
    return st;
  }
  for (k = 0; k < int(parts.size()); ++k)
    lease->parts[k] = static_cast<unsigned char*>(lease->device) + offsets[k];
  return Status::success();
}

Status HostTableRing::release(const Lease& lease, cudaStream_t stream) {
  if (lease.slot < 0) return Status::success();
  if (lease.device != nullptr) {
    Status st = check(cudaFreeAsync(lease.device, stream), "cudaFreeAsync");
    if (!st.ok) return st;
  }
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
