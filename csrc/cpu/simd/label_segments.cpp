// Compiled once per ISA level (see fastfair/cpu_isa.h). Segments are spread over threads (a row's
// numbers never depend on the split). Per segment, its model is widened once to float64 with the
// classes padded to a multiple of 8 (W_d [F, Cp] and b_d [Cp], zero beyond C), so that a row's
// logits are NV = Cp / 8 vectors of 8 doubles held in registers; up to 32 classes, 4 rows go
// through the feature loop together (independent chains hide the additions' latency), and wider
// models take a plain loop. Either way each logit is the header's sequence of operations, each
// rounded on its own: no contraction into FMA.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "fastfair/label_segments.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace fastfair::cpu::FASTFAIR_ISA {
namespace {

typedef double V8 __attribute__((vector_size(64)));

// By reference: a vector return value would change the ABI of the narrower ISA copies.
[[gnu::always_inline]] inline void load8(V8& v, const double* p) { std::memcpy(&v, p, sizeof(v)); }

// x[r] <- x[r] * scale + shift for one row (float32, two roundings).
inline void transform(float* x, const float* scale, const float* shift, int64_t F) {
#pragma omp simd
  for (int64_t f = 0; f < F; ++f) {
    const float scaled = x[f] * scale[f];
    x[f] = scaled + shift[f];
  }
}

int64_t first_max(const double* logits, int64_t C) {
  int64_t best = 0;
  for (int64_t c = 1; c < C; ++c)
    if (logits[c] > logits[best]) best = c;
  return best;
}

// Labels of R consecutive rows at x (row stride F), NV vectors of classes.
template <int NV, int R>
[[gnu::always_inline]] inline void label_rows(const float* x, int64_t F, int64_t C,
                                              const double* Wd, const double* bd, int64_t* y) {
  V8 acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) load8(acc[r][v], bd + 8 * v);
  for (int64_t f = 0; f < F; ++f) {
    V8 w[NV];
    for (int v = 0; v < NV; ++v) load8(w[v], Wd + f * 8 * NV + 8 * v);
    for (int r = 0; r < R; ++r) {
      const double xf = double(x[r * F + f]);
      for (int v = 0; v < NV; ++v) {
        const V8 p = xf * w[v];
        acc[r][v] = acc[r][v] + p;
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    double logits[8 * NV];
    std::memcpy(logits, acc[r], sizeof(logits));
    y[r] = first_max(logits, C);
  }
}

template <int NV>
void label_segment(const LabelSegmentsArgs& a, int64_t i, const double* Wd, const double* bd) {
  const int64_t F = a.features, C = a.classes;
  int64_t r = a.offsets[i];
  const int64_t end = a.offsets[i + 1];
  const float* shift = a.shift ? a.shift + i * F : nullptr;
  for (; r + 4 <= end; r += 4) {
    if (a.scale)
      for (int k = 0; k < 4; ++k) transform(a.x + (r + k) * F, a.scale, shift, F);
    label_rows<NV, 4>(a.x + r * F, F, C, Wd, bd, a.y + r);
  }
  for (; r < end; ++r) {
    if (a.scale) transform(a.x + r * F, a.scale, shift, F);
    label_rows<NV, 1>(a.x + r * F, F, C, Wd, bd, a.y + r);
  }
}

// More than 32 classes: one row at a time, the same operations in the same order.
void label_segment_wide(const LabelSegmentsArgs& a, int64_t i, const double* Wd,
                        const double* bd, int64_t Cp, double* acc) {
  const int64_t F = a.features, C = a.classes;
  const float* shift = a.shift ? a.shift + i * F : nullptr;
  for (int64_t r = a.offsets[i]; r < a.offsets[i + 1]; ++r) {
    float* x = a.x + r * F;
    if (a.scale) transform(x, a.scale, shift, F);
    std::copy(bd, bd + Cp, acc);
    for (int64_t f = 0; f < F; ++f) {
      const double xf = double(x[f]);
      const double* w = Wd + f * Cp;
#pragma omp simd
      for (int64_t c = 0; c < Cp; ++c) {
        const double p = xf * w[c];
        acc[c] = acc[c] + p;
      }
    }
    a.y[r] = first_max(acc, C);
  }
}

}  // namespace

Status label_segments(const LabelSegmentsArgs& a) {
  const int64_t m = a.segments, F = a.features, C = a.classes;
  const int64_t Cp = (C + 7) / 8 * 8;
#pragma omp parallel if (a.rows * F * C >= (int64_t(1) << 20))
  {
    std::vector<double> Wd(static_cast<size_t>(F * Cp), 0.0);
    std::vector<double> bd(static_cast<size_t>(Cp), 0.0);
    std::vector<double> acc(static_cast<size_t>(Cp), 0.0);
#pragma omp for schedule(dynamic, 8)
    for (int64_t i = 0; i < m; ++i) {
      if (a.offsets[i + 1] <= a.offsets[i]) continue;
      const float* W = a.W + i * F * C;
      for (int64_t f = 0; f < F; ++f)
        for (int64_t c = 0; c < C; ++c) Wd[size_t(f * Cp + c)] = double(W[f * C + c]);
      for (int64_t c = 0; c < C; ++c) bd[size_t(c)] = double(a.b[i * C + c]);
      switch (Cp / 8) {
        case 1: label_segment<1>(a, i, Wd.data(), bd.data()); break;
        case 2: label_segment<2>(a, i, Wd.data(), bd.data()); break;
        case 3: label_segment<3>(a, i, Wd.data(), bd.data()); break;
        case 4: label_segment<4>(a, i, Wd.data(), bd.data()); break;
        default: label_segment_wide(a, i, Wd.data(), bd.data(), Cp, acc.data());
      }
    }
  }
  return Status::success();
}

}  // namespace fastfair::cpu::FASTFAIR_ISA
