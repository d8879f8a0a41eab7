// Compiled once per ISA level (see fastfair/cpu_isa.h): plain loops that GCC vectorises.
#include "fastfair/superfed.h"

#include <algorithm>
#include <vector>

namespace fastfair::cpu::FASTFAIR_ISA {
namespace {

constexpr int64_t kTile = 8192;

struct Tile {
  int64_t row, seg, begin, end;
};

// Tiles never cross a segment, so each belongs to one (row, segment) and sums stay per segment.
std::vector<Tile> tiles_of(const SuperFedLayout& L) {
  std::vector<Tile> tiles;
  for (int64_t r = 0; r < L.rows; ++r)
    for (int64_t s = 0; s < L.segments; ++s)
      for (int64_t b = L.offsets[s]; b < L.offsets[s + 1]; b += kTile)
        tiles.push_back({r, s, b, std::min(L.offsets[s + 1], b + kTile)});
  return tiles;
}

}  // namespace

Status superfed_reduce(const SuperFedReduceArgs& a) {
  const SuperFedLayout& L = a.layout;
  const std::vector<Tile> tiles = tiles_of(L);
  const int64_t n = int64_t(tiles.size());
  std::vector<double> part(size_t(4 * n));
#pragma omp parallel for schedule(static) if (L.rows * L.cols >= (int64_t(1) << 16))
  for (int64_t t = 0; t < n; ++t) {
    const Tile& T = tiles[size_t(t)];
    const float* f = a.f + T.row * L.cols;
    const float* l = a.l + T.row * L.cols;
    double fl = 0, ff = 0, ll = 0, dd = 0;
    if (L.twinned[T.seg]) {
#pragma omp simd reduction(+ : fl, ff, ll, dd)
      for (int64_t p = T.begin; p < T.end; ++p) {
        const double fv = f[p], lv = l[p], d = fv - double(a.g[p]);
        fl += fv * lv;
        ff += fv * fv;
        ll += lv * lv;
        dd += d * d;
      }
    } else {
#pragma omp simd reduction(+ : dd)
      for (int64_t p = T.begin; p < T.end; ++p) {
        const double d = double(f[p]) - double(a.g[p]);
        dd += d * d;
      }
    }
    part[size_t(4 * t)] = fl;
    part[size_t(4 * t + 1)] = ff;
    part[size_t(4 * t + 2)] = ll;
    part[size_t(4 * t + 3)] = dd;
  }
  std::fill(a.out, a.out + 4 * L.rows * L.segments, 0.0);
  for (int64_t t = 0; t < n; ++t) {
    double* o = a.out + 4 * (tiles[size_t(t)].row * L.segments + tiles[size_t(t)].seg);
    for (int k = 0; k < 4; ++k) o[k] += part[size_t(4 * t + k)];
  }
  return Status::success();
}

Status superfed_step(const SuperFedStepArgs& a) {
  const SuperFedLayout& L = a.layout;
  const std::vector<Tile> tiles = tiles_of(L);
  const int64_t n = int64_t(tiles.size());
#pragma omp parallel for schedule(static) if (L.rows * L.cols >= (int64_t(1) << 16))
  for (int64_t t = 0; t < n; ++t) {
    const Tile& T = tiles[size_t(t)];
    const int64_t r = T.row, base = r * L.cols;
    const bool tw = L.twinned[T.seg] != 0;
    const float lam = tw ? float(a.lam[r * L.segments + T.seg]) : 0.0f;
    const float lam_next = tw ? float((a.lam_next ? a.lam_next : a.lam)[r * L.segments + T.seg]) : 0.0f;
    float* __restrict__ f = a.f + base;
    float* __restrict__ l = a.l + base;
    float* __restrict__ mixed = a.mixed + base;
    if (a.grad && a.active[r]) {
      const float* __restrict__ grad = a.grad + base;
      const float* __restrict__ g = a.g;
      float* __restrict__ bf = a.buf_f + base;
      float* __restrict__ bl = a.buf_l + base;
      const float lr = float(a.lr), mom = float(a.momentum), wd = float(a.weight_decay);
      const float prox = float(a.prox[r * L.segments + T.seg]);
      const double* o = a.orth + 4 * r;
      const float af = tw ? float(o[0]) : 0.0f, bfc = tw ? float(o[1]) : 0.0f;
      const float al = float(o[2]), blc = float(o[3]);
      if (tw && a.train_local) {
#pragma omp simd
        for (int64_t p = T.begin; p < T.end; ++p) {
          const float fv = f[p], lv = l[p], dl = grad[p];
          const float gf = (1.0f - lam) * dl + prox * (fv - g[p]) + wd * fv + af * lv + bfc * fv;
          const float gl = lam * dl + wd * lv + al * fv + blc * lv;
          const float nbf = mom * bf[p] + gf, nbl = mom * bl[p] + gl;
          const float nf = fv - lr * nbf, nl = lv - lr * nbl;
          bf[p] = nbf;
          bl[p] = nbl;
          f[p] = nf;
          l[p] = nl;
          mixed[p] = (1.0f - lam_next) * nf + lam_next * nl;
        }
      } else {
#pragma omp simd
        for (int64_t p = T.begin; p < T.end; ++p) {
          const float fv = f[p], dl = grad[p];
          const float lv = tw ? l[p] : 0.0f;
          const float gf = (1.0f - lam) * dl + prox * (fv - g[p]) + wd * fv + af * lv + bfc * fv;
          const float nbf = mom * bf[p] + gf;
          const float nf = fv - lr * nbf;
          bf[p] = nbf;
          f[p] = nf;
          mixed[p] = tw ? (1.0f - lam_next) * nf + lam_next * lv : nf;
        }
      }
    } else {
      const float mix = a.grad ? lam_next : lam;
#pragma omp simd
      for (int64_t p = T.begin; p < T.end; ++p)
        mixed[p] = tw ? (1.0f - mix) * f[p] + mix * l[p] : f[p];
    }
  }
  return Status::success();
}

}  // namespace fastfair::cpu::FASTFAIR_ISA
