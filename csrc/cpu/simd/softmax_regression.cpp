// Compiled once per ISA level (see fastfair/cpu_isa.h). One model row per work item: its model is
// held as F + 1 rows of NB vectors of 16 floats (classes padded with weight 0 and bias -inf, whose
// probability is exactly 0), and a step copies its v rows of x into a zero-padded scratch so that
// the products run on whole vectors: the forward pass keeps R rows' logits in registers across the
// features, the backward pass FB features' gradients across the rows, so every FMA chain has
// independent neighbours. GCC lowers the 64-byte vector type to the ISA's registers (one AVX-512,
// two AVX2, four SSE registers).
#include "fastfair/softmax_regression.h"

// The 64-byte vector type passes by value only to functions of this copy of the kernel (inline
// templates of one ISA), never across the ABI to code built for another.
#pragma GCC diagnostic ignored "-Wpsabi"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "fastfair/fast_exp.h"

namespace fastfair::cpu::FASTFAIR_ISA {
namespace {

typedef float V __attribute__((vector_size(64)));
typedef uint32_t VI __attribute__((vector_size(64)));
constexpr int kLanes = 16;
constexpr int kMaxBlocks = 8;  // up to 128 classes
constexpr float kLog2e = 1.4426950408889634f;

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

inline float lane_max(V v) {
  float m = v[0];
  for (int l = 1; l < kLanes; ++l) m = std::max(m, v[l]);
  return m;
}

inline float lane_sum(V v) {
  float s = 0.0f;
  for (int l = 0; l < kLanes; ++l) s += v[l];
  return s;
}

// The client's rows 0 .. n - 1 in the order of epoch e (the header's u(e, j), ties by j).
void epoch_order(uint64_t key, uint64_t e, int64_t n, std::vector<std::pair<uint64_t, int64_t>>& buf,
                 std::vector<int64_t>& order) {
  const uint64_t h = splitmix64(key ^ e);
  for (int64_t j = 0; j < n; ++j) buf[j] = {splitmix64(h ^ uint64_t(j)) >> 11, j};
  std::sort(buf.begin(), buf.begin() + n);
  for (int64_t j = 0; j < n; ++j) order[j] = buf[j].second;
}

template <int NB>
struct Trainer {
  static constexpr int R = NB == 1 ? 8 : NB == 2 ? 4 : 2;   // rows per forward group
  static constexpr int FB = NB == 1 ? 8 : NB == 2 ? 4 : 2;  // features per backward group

  const SoftmaxRegressionArgs& a;
  int64_t F, Fp, C;
  std::vector<V> W;        // [Fp][NB]; rows F .. Fp - 1 stay 0
  V b[NB];
  std::vector<float> xb;   // [B][Fp] the step's rows, zero-padded features
  std::vector<V> z;        // [B + R][NB] logits, then the gradient of the step's mean loss
  std::vector<const float*> xs;  // [B] the rows a forward pass reads
  std::vector<std::pair<uint64_t, int64_t>> keys;
  std::vector<int64_t> order;

  explicit Trainer(const SoftmaxRegressionArgs& args)
      : a(args), F(args.features), Fp((args.features + FB - 1) / FB * FB), C(args.classes),
        W(size_t(Fp) * NB), xb(size_t(args.batch_size + R) * Fp),
        z(size_t(args.batch_size + R) * NB), xs(size_t(args.batch_size)) {}

  // Logits of rows xs[0 .. v) into z, R rows at a time (a short last group repeats its rows).
  void forward(int64_t v) {
    for (int64_t i0 = 0; i0 < v; i0 += R) {
      const float* xr[R];
      for (int r = 0; r < R; ++r) xr[r] = xs[std::min<int64_t>(i0 + r, v - 1)];
      V acc[R][NB];
      for (int r = 0; r < R; ++r)
        for (int j = 0; j < NB; ++j) acc[r][j] = b[j];
      for (int64_t f = 0; f < F; ++f) {
        const V* w = W.data() + f * NB;
        for (int r = 0; r < R; ++r) {
          const float s = xr[r][f];
          for (int j = 0; j < NB; ++j) acc[r][j] += s * w[j];
        }
      }
      for (int r = 0; r < R; ++r)
        for (int j = 0; j < NB; ++j) z[(i0 + r) * NB + j] = acc[r][j];
    }
  }

  // Row i's logits -> e^(z - max) in place; returns (max, sum of the exponentials).
  std::pair<float, float> exponentials(int64_t i) {
    V* zi = z.data() + i * NB;
    V m = zi[0];
    for (int j = 1; j < NB; ++j) m = m > zi[j] ? m : zi[j];
    const float top = lane_max(m);
    V s = V{} + 0.0f;
    for (int j = 0; j < NB; ++j) {
      zi[j] = detail::exp2_neg_f32<V, VI, true>((zi[j] - top) * kLog2e);
      s += zi[j];
    }
    return {top, lane_sum(s)};
  }

  float logit(int64_t i, int64_t c) const { return z[i * NB + c / kLanes][c % kLanes]; }

  void load(const float* theta) {
    for (int64_t f = 0; f < F; ++f)
      for (int j = 0; j < NB; ++j)
        for (int l = 0; l < kLanes; ++l) {
          const int64_t c = j * kLanes + l;
          W[f * NB + j][l] = c < C ? theta[f * C + c] : 0.0f;
        }
    for (int j = 0; j < NB; ++j)
      for (int l = 0; l < kLanes; ++l) {
        const int64_t c = j * kLanes + l;
        b[j][l] = c < C ? theta[F * C + c] : -INFINITY;
      }
  }

  void store(float* theta) const {
    for (int64_t f = 0; f < F; ++f)
      for (int64_t c = 0; c < C; ++c) theta[f * C + c] = W[f * NB + c / kLanes][c % kLanes];
    for (int64_t c = 0; c < C; ++c) theta[F * C + c] = b[c / kLanes][c % kLanes];
  }

  // Mean cross-entropy of the current model on the client's rows x0[0 .. n), labels y0.
  double mean_loss(const float* x0, const int64_t* y0, int64_t n) {
    double total = 0.0;
    const int64_t B = a.batch_size;
    for (int64_t lo = 0; lo < n; lo += B) {
      const int64_t v = std::min(B, n - lo);
      for (int64_t i = 0; i < v; ++i) xs[i] = x0 + (lo + i) * F;
      forward(v);
      for (int64_t i = 0; i < v; ++i) {
        const float zy = logit(i, y0[lo + i]);
        const auto [top, sum] = exponentials(i);
        total += double(std::log(sum) + (top - zy));
      }
    }
    return total / double(n);
  }

  // One SGD step on the rows `rows[0 .. v)` of the client (x0, y0).
  void step(const float* x0, const int64_t* y0, const int64_t* rows, int64_t v) {
    for (int64_t i = 0; i < v; ++i) {
      float* dst = xb.data() + i * Fp;
      const float* src = x0 + rows[i] * F;
      std::copy(src, src + F, dst);
      xs[i] = dst;
    }
    forward(v);
    const float inv_v = 1.0f / float(v);
    for (int64_t i = 0; i < v; ++i) {
      const int64_t y = y0[rows[i]];
      const float sum = exponentials(i).second;
      V* gi = z.data() + i * NB;
      const float scale = inv_v / sum;
      for (int j = 0; j < NB; ++j) gi[j] *= scale;
      gi[y / kLanes][y % kLanes] -= inv_v;
    }
    const float lr = a.lr;
    for (int64_t f0 = 0; f0 < Fp; f0 += FB) {
      V acc[FB][NB];
      for (int q = 0; q < FB; ++q)
        for (int j = 0; j < NB; ++j) acc[q][j] = V{} + 0.0f;
      for (int64_t i = 0; i < v; ++i) {
        const float* xi = xb.data() + i * Fp + f0;
        const V* gi = z.data() + i * NB;
        for (int q = 0; q < FB; ++q) {
          const float s = xi[q];
          for (int j = 0; j < NB; ++j) acc[q][j] += s * gi[j];
        }
      }
      for (int q = 0; q < FB; ++q)
        for (int j = 0; j < NB; ++j) W[(f0 + q) * NB + j] -= lr * acc[q][j];
    }
    V gb[NB];
    for (int j = 0; j < NB; ++j) gb[j] = V{} + 0.0f;
    for (int64_t i = 0; i < v; ++i)
      for (int j = 0; j < NB; ++j) gb[j] += z[i * NB + j];
    for (int j = 0; j < NB; ++j) {
      // Padded classes keep bias -inf (their gradient is exactly 0; -inf - 0 stays -inf).
      b[j] -= lr * gb[j];
    }
  }

  void train_row(int64_t r) {
    const int64_t k = a.client[r];
    const int64_t first = a.offsets[k], n = a.offsets[k + 1] - first;
    const float* x0 = a.x + first * F;
    const int64_t* y0 = a.y + first;
    float* theta = a.params + r * (F * C + C);
    load(theta);
    if (a.received_loss) a.received_loss[r] = n ? mean_loss(x0, y0, n) : NAN;
    const int64_t steps = n ? a.steps[r] : 0;
    if (steps == 0) return;
    const int64_t B = a.batch_size, per_epoch = (n + B - 1) / B;
    if (int64_t(order.size()) < n) {
      order.resize(n);
      keys.resize(n);
    }
    for (int64_t t = 0; t < steps; ++t) {
      const int64_t within = t % per_epoch;
      if (within == 0) epoch_order(uint64_t(a.keys[k]), uint64_t(t / per_epoch), n, keys, order);
      const int64_t lo = within * B;
      step(x0, y0, order.data() + lo, std::min(B, n - lo));
    }
    store(theta);
  }
};

// The labels of every client a row trains, all checked before any row is written: the first
// label outside [0, C), if any, fails the call with params untouched.
Status check_labels(const SoftmaxRegressionArgs& a) {
  std::vector<uint8_t> trained(static_cast<size_t>(a.clients), 0);
  for (int64_t r = 0; r < a.rows; ++r) trained[a.client[r]] = 1;
  int64_t bad = std::numeric_limits<int64_t>::max();
#pragma omp parallel for schedule(dynamic, 16) reduction(min : bad)
  for (int64_t k = 0; k < a.clients; ++k) {
    if (!trained[k]) continue;
    for (int64_t i = a.offsets[k]; i < a.offsets[k + 1]; ++i)
      if (a.y[i] < 0 || a.y[i] >= a.classes) {
        bad = std::min(bad, i);
        break;
      }
  }
  if (bad == std::numeric_limits<int64_t>::max()) return Status::success();
  const int64_t k = std::upper_bound(a.offsets, a.offsets + a.clients + 1, bad) - a.offsets - 1;
  return Status::error("y[" + std::to_string(bad) + "] = " + std::to_string(a.y[bad]) +
                       " is a class outside [0, C) = [0, " + std::to_string(a.classes) +
                       ") (a row of client " + std::to_string(k) + "); pass labels in [0, C)");
}

template <int NB>
Status run(const SoftmaxRegressionArgs& a) {
  if (Status st = check_labels(a); !st.ok) return st;
#pragma omp parallel
  {
    Trainer<NB> trainer(a);
#pragma omp for schedule(dynamic, 1)
    for (int64_t r = 0; r < a.rows; ++r) trainer.train_row(r);
  }
  return Status::success();
}

}  // namespace

Status softmax_regression_sgd(const SoftmaxRegressionArgs& a) {
  switch ((a.classes + kLanes - 1) / kLanes) {
    case 1: return run<1>(a);
    case 2: return run<2>(a);
    case 3: return run<3>(a);
    case 4: return run<4>(a);
    case 5: return run<5>(a);
    case 6: return run<6>(a);
    case 7: return run<7>(a);
    case 8: return run<8>(a);
    default:
      return Status::error("softmax_regression_sgd supports 1 to " +
                           std::to_string(kMaxBlocks * kLanes) + " classes; got " +
                           std::to_string(a.classes));
  }
}

}  // namespace fastfair::cpu::FASTFAIR_ISA
