// Data collection fused into one kernel: K steps of observe -> policy -> action -> CartPole step
// -> record, one thread per environment, compiled at run time by NVRTC (CuPy) with cartpole.cu.
//
// The policy is the data-collection study's MLP (4 -> 64 -> 64 -> 2, tanh), read at every
// launch from the torch module's own parameter buffers (PyTorch's layout: weight[out][in]), so a
// learner that updates them in place changes the next launch's actions. They are staged in
// shared memory once per block; activations stay in registers.
//
// Template knobs:
//   K       steps per launch;
//   RECORD  0: episode statistics only; 1: also every step's (obs, action, reward, done) into a
//           trajectory buffer of K rows, structure-of-arrays: obs[(k * 4 + c) * n + i],
//           action/reward/done[k * n + i];
//   SAMPLE  false: argmax of the logits (ties pick action 0, as torch.argmax); true: sample from
//           softmax(logits) with a per-environment generator kept apart from the reset
//           generator, so resets draw the same numbers in both modes.
//
// Arithmetic is FP32 with IEEE tanhf and the same physics as cartpole_step (PRECISE), so actions
// equal PyTorch's on the same weights and states except where the logits tie within rounding.

#include "cartpole.cu"

namespace rlscope_policy {

constexpr int kObs = 4;
constexpr int kHidden = 64;
constexpr int kActions = 2;

struct Weights {
  float w1[kHidden][kObs];
  float b1[kHidden];
  float w2[kHidden][kHidden];
  float b2[kHidden];
  float w3[kActions][kHidden];
  float b3[kActions];
};

__device__ __forceinline__ void stage(Weights& w, const float* __restrict__ w1, const float* __restrict__ b1,
                                      const float* __restrict__ w2, const float* __restrict__ b2,
                                      const float* __restrict__ w3, const float* __restrict__ b3) {
  for (int j = threadIdx.x; j < kHidden * kObs; j += blockDim.x) (&w.w1[0][0])[j] = w1[j];
  for (int j = threadIdx.x; j < kHidden * kHidden; j += blockDim.x) (&w.w2[0][0])[j] = w2[j];
  for (int j = threadIdx.x; j < kActions * kHidden; j += blockDim.x) (&w.w3[0][0])[j] = w3[j];
  for (int j = threadIdx.x; j < kHidden; j += blockDim.x) {
    w.b1[j] = b1[j];
    w.b2[j] = b2[j];
  }
  if (threadIdx.x < kActions) w.b3[threadIdx.x] = b3[threadIdx.x];
  __syncthreads();
}

// Logits of one observation. Every thread of a warp reads the same weight at the same time: a
// shared-memory broadcast, no bank conflicts. Not inlined: inside the K loop ptxas scheduled the
// 64 tanhf of the first layer beside the loop's state and spilled (255 registers, ~450 B of
// spills per thread); as a call it needs 121 registers and spills nothing.
__device__ __noinline__ void logits(const Weights& w, const rlscope_cartpole::State& s, float* out) {
  const float o[kObs] = {s.x, s.x_dot, s.theta, s.theta_dot};
  float h1[kHidden];
#pragma unroll
  for (int j = 0; j < kHidden; ++j) {
    float acc = w.b1[j];
#pragma unroll
    for (int i = 0; i < kObs; ++i) acc = fmaf(w.w1[j][i], o[i], acc);
    h1[j] = tanhf(acc);
  }
  float l0 = w.b3[0], l1 = w.b3[1];
#pragma unroll 1
  for (int j = 0; j < kHidden; ++j) {
    float acc = w.b2[j];
#pragma unroll
    for (int i = 0; i < kHidden; ++i) acc = fmaf(w.w2[j][i], h1[i], acc);
    const float h2 = tanhf(acc);
    l0 = fmaf(w.w3[0][j], h2, l0);
    l1 = fmaf(w.w3[1][j], h2, l1);
  }
  out[0] = l0;
  out[1] = l1;
}

// P(action 1) = softmax(logits)[1] = sigmoid(l1 - l0); u uniform in [0, 1) on a 2^-24 grid.
__device__ __forceinline__ bool sample_right(float margin, unsigned& gen) {
  const float u = __uint2float_rn(rlscope_cartpole::next_random(gen) >> 8) * (1.0f / 16777216.0f);
  return u < 1.0f / (1.0f + expf(-margin));
}

// One environment's data collection through a launch: loaded at the start, advanced one step
// at a time with the action the policy chose, stored at the end. Both kernels use it, so their
// simulation and recording are the same code.
struct Collector {
  rlscope_cartpole::State s;
  int steps;
  unsigned seed, gen;  // reset generator, sampling generator
  int finished;
  long long finished_steps;

  // An index past n is a padding row: stepped like the others, never stored.
  template <bool SAMPLE>
  __device__ __forceinline__ void load(const float* state, const int* elapsed, const unsigned* rng,
                                       const unsigned* sample_rng, long long i, long long n) {
    s = {0.0f, 0.0f, 0.0f, 0.0f};
    steps = 0, seed = 1u, gen = 1u, finished = 0, finished_steps = 0;
    if (i < n) {
      s = rlscope_cartpole::load_mean<1>(state, n, i);
      steps = elapsed[i];
      seed = rng[i];
      if (SAMPLE) gen = sample_rng[i];
    }
  }

  // Step k: records (obs, action, reward, done) when `record`, then steps with same-step autoreset.
  __device__ __forceinline__ void advance(bool right, int k, bool record, long long i, long long n,
                                          float* __restrict__ traj_obs, unsigned char* __restrict__ traj_action,
                                          float* __restrict__ traj_reward, unsigned char* __restrict__ traj_done) {
    if (record) {
      const float o[kObs] = {s.x, s.x_dot, s.theta, s.theta_dot};
#pragma unroll
      for (int c = 0; c < kObs; ++c) traj_obs[((long long)k * kObs + c) * n + i] = o[c];
      traj_action[(long long)k * n + i] = right;
      traj_reward[(long long)k * n + i] = 1.0f;
    }
    s = rlscope_cartpole::physics<1, true>(s, right);
    ++steps;
    const bool done = rlscope_cartpole::terminated(s) | (steps >= rlscope_cartpole::kMaxEpisodeSteps);
    if (record) traj_done[(long long)k * n + i] = done;
    if (done) {
      s = rlscope_cartpole::fresh_state(seed);
      ++finished;
      finished_steps += steps;
      steps = 0;
    }
  }

  template <bool SAMPLE>
  __device__ __forceinline__ void store(float* state, int* elapsed, unsigned* rng, unsigned* sample_rng, int* episodes,
                                        long long* episode_steps, float* obs_out, long long i, long long n) const {
    const float o[kObs] = {s.x, s.x_dot, s.theta, s.theta_dot};
#pragma unroll
    for (int c = 0; c < kObs; ++c) {
      state[c * n + i] = o[c];
      obs_out[i * kObs + c] = o[c];
    }
    elapsed[i] = steps;
    rng[i] = seed;
    if (SAMPLE) sample_rng[i] = gen;
    episodes[i] += finished;
    episode_steps[i] += finished_steps;
  }
};

}  // namespace rlscope_policy

using namespace rlscope_policy;

template <int K, int RECORD, bool SAMPLE>
__global__ void __launch_bounds__(256) cartpole_policy_collect(
    float* __restrict__ state, int* __restrict__ elapsed, unsigned* __restrict__ rng,
    unsigned* __restrict__ sample_rng, const float* __restrict__ w1, const float* __restrict__ b1,
    const float* __restrict__ w2, const float* __restrict__ b2, const float* __restrict__ w3,
    const float* __restrict__ b3, int* __restrict__ episodes, long long* __restrict__ episode_steps,
    float* __restrict__ obs_out, float* __restrict__ traj_obs, unsigned char* __restrict__ traj_action,
    float* __restrict__ traj_reward, unsigned char* __restrict__ traj_done, long long n) {
  __shared__ Weights weights;
  stage(weights, w1, b1, w2, b2, w3, b3);
  const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i >= n) return;
  Collector env;
  env.load<SAMPLE>(state, elapsed, rng, sample_rng, i, n);
#pragma unroll 1
  for (int k = 0; k < K; ++k) {
    float l[kActions];
    logits(weights, env.s, l);
    const bool right = SAMPLE ? sample_right(l[1] - l[0], env.gen) : (l[1] > l[0]);
    env.advance(right, k, RECORD, i, n, traj_obs, traj_action, traj_reward, traj_done);
  }
  env.store<SAMPLE>(state, elapsed, rng, sample_rng, episodes, episode_steps, obs_out, i, n);
}

// ---------------------------------------------------------------------------------------------
// The same loop with all three layers on tensor cores: mma.sync with fp16 operands and fp32
// accumulators. A warp steps a tile of 16 environments, the M dimension of the MMAs. Lane l of
// the warp (group g = l / 4, t = l % 4 in its quad) holds what the MMA layouts give it: rows g
// and g + 8 of the tile, columns 8 j + 2 t and 8 j + 2 t + 1 of every 8-wide column tile j. An
// accumulator tile pair is an A tile of the next layer, so activations never leave registers.
//
// - layer 1 (4 -> 64): m16n8k8. The A operand is the observation padded to 8 columns, column 4
//   holding 1.0 so that B's row 4 adds the bias; 8 MMAs per step. Its five-term sums accumulate
//   in fp16: the accumulators are then tanh's packed input as they stand, which saves the
//   conversions that, with tanh, fill the special-function pipe (the kernel's bottleneck);
//   rounding the sum costs no more than rounding its inputs to fp16 already does;
// - layer 2 (64 -> 64): m16n8k16, fp32 accumulators, W2 held in registers as B fragments (64 registers) for the
//   whole launch; 32 MMAs per step, bias from shared memory as the accumulators' start;
// - layer 3 (64 -> 2): m16n8k16, the two logits padded to 8 columns; 4 MMAs per step;
// - tanh: tanh.approx.f16x2 on packed pairs (one MUFU op per two activations).
//
// fp16 rather than bf16: activations lie in [-1, 1] and weights well inside fp16's range, so its
// 10-bit mantissa is the better use of 16 bits (bf16 keeps 7).
//
// Each environment is stepped by two lanes of its quad: even lanes own row g's environment, odd
// lanes row g + 8's; the quad swaps observations with one shuffle per component and gets the
// logit margin from lane t = 0, which holds the logits of both rows.

namespace rlscope_policy_mma {

constexpr int kTile = 16;  // environments per warp

// (lo, hi) -> f16x2, lo in the lower half: the element of the lower column index.
__device__ __forceinline__ unsigned pack_f16(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

__device__ __forceinline__ unsigned tanh_f16x2(unsigned x) {
  unsigned r;
  asm("tanh.approx.f16x2 %0, %1;" : "=r"(r) : "r"(x));
  return r;
}

// fp16 accumulators: d[0] holds row g's two columns as f16x2, d[1] row g + 8's.
__device__ __forceinline__ void mma_k8_f16(unsigned* d, const unsigned* a, unsigned b) {
  asm("mma.sync.aligned.m16n8k8.row.col.f16.f16.f16.f16 {%0,%1}, {%2,%3}, {%4}, {%5,%6};"
      : "=r"(d[0]), "=r"(d[1])
      : "r"(a[0]), "r"(a[1]), "r"(b), "r"(0u), "r"(0u));
}

__device__ __forceinline__ void mma_k16(float* d, const unsigned* a, const unsigned* b) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// The policy's weights as this lane's B fragments, loaded once per launch.
struct Fragments {
  unsigned w1[8];        // layer 1, column tile j: B[k = 2t, 2t + 1][n = 8 j + g]
  unsigned w2[4][8][2];  // layer 2, k tile kk, column tile j: B[k][n] = W2[n][k]
  unsigned w3[4][2];     // layer 3, k tile kk: B[k][n] = W3[n][k] for n = g < 2, else 0
  float b3[2];           // layer 3's bias in this lane's accumulator columns (t = 0 only)
};

__device__ __forceinline__ Fragments load_fragments(const float* __restrict__ w1, const float* __restrict__ b1,
                                                    const float* __restrict__ w2, const float* __restrict__ w3,
                                                    const float* __restrict__ b3, int g, int t) {
  Fragments f;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int n = 8 * j + g;  // padded input row: x, x_dot, theta, theta_dot, 1 (bias), 0, 0, 0
    const float lo = t < 2 ? w1[n * kObs + 2 * t] : (t == 2 ? b1[n] : 0.0f);
    const float hi = t < 2 ? w1[n * kObs + 2 * t + 1] : 0.0f;
    f.w1[j] = pack_f16(lo, hi);
  }
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float* row = w2 + (8 * j + g) * kHidden + 16 * kk + 2 * t;
      f.w2[kk][j][0] = pack_f16(row[0], row[1]);
      f.w2[kk][j][1] = pack_f16(row[8], row[9]);
    }
    const float* row = w3 + g * kHidden + 16 * kk + 2 * t;
    f.w3[kk][0] = g < kActions ? pack_f16(row[0], row[1]) : 0u;
    f.w3[kk][1] = g < kActions ? pack_f16(row[8], row[9]) : 0u;
  }
  f.b3[0] = t == 0 ? b3[0] : 0.0f;
  f.b3[1] = t == 0 ? b3[1] : 0.0f;
  return f;
}

// l1 - l0 of this lane's environment. `o` is its observation; the quad's other row comes from
// the neighbouring lane.
__device__ __forceinline__ float margin_mma(const Fragments& f, const float* __restrict__ b2, const float* o, int t) {
  const bool odd = t & 1;
  float other[kObs];
#pragma unroll
  for (int c = 0; c < kObs; ++c) other[c] = __shfl_xor_sync(0xffffffffu, o[c], 1);
  float row_g[kObs], row_g8[kObs];
#pragma unroll
  for (int c = 0; c < kObs; ++c) {
    row_g[c] = odd ? other[c] : o[c];
    row_g8[c] = odd ? o[c] : other[c];
  }
  const unsigned one = 0x3C00u;  // f16 1.0 in the lower half: column 4
  unsigned a1[2];
  a1[0] = t == 0 ? pack_f16(row_g[0], row_g[1]) : t == 1 ? pack_f16(row_g[2], row_g[3]) : t == 2 ? one : 0u;
  a1[1] = t == 0 ? pack_f16(row_g8[0], row_g8[1]) : t == 1 ? pack_f16(row_g8[2], row_g8[3]) : t == 2 ? one : 0u;

  unsigned a2[4][4];  // layer 2's A: k tile kk = column tiles 2 kk (a[0], a[1]) and 2 kk + 1 (a[2], a[3])
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    unsigned d[2];
    mma_k8_f16(d, a1, f.w1[j]);
    a2[j / 2][2 * (j % 2)] = tanh_f16x2(d[0]);
    a2[j / 2][2 * (j % 2) + 1] = tanh_f16x2(d[1]);
  }
  float l[4] = {f.b3[0], f.b3[1], f.b3[0], f.b3[1]};
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    unsigned a3[4];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int j = 2 * kk + half;
      const float2 bias = reinterpret_cast<const float2*>(b2)[4 * j + t];
      float d[4] = {bias.x, bias.y, bias.x, bias.y};
#pragma unroll
      for (int k2 = 0; k2 < 4; ++k2) mma_k16(d, a2[k2], f.w2[k2][j]);
      a3[2 * half] = tanh_f16x2(pack_f16(d[0], d[1]));
      a3[2 * half + 1] = tanh_f16x2(pack_f16(d[2], d[3]));
    }
    mma_k16(l, a3, f.w3[kk]);
  }
  // Lane t = 0 holds (l0, l1) of row g in l[0..1] and of row g + 8 in l[2..3].
  const int leader = (threadIdx.x & 31) & ~3;
  const float m_g = __shfl_sync(0xffffffffu, l[1] - l[0], leader);
  const float m_g8 = __shfl_sync(0xffffffffu, l[3] - l[2], leader);
  return odd ? m_g8 : m_g;
}

}  // namespace rlscope_policy_mma

// Same arguments and outputs as cartpole_policy_collect; launch 2 threads per environment
// (a warp per 16), rounded up to whole warps.
template <int K, int RECORD, bool SAMPLE>
__global__ void __launch_bounds__(256, 2) cartpole_policy_collect_mma(
    float* __restrict__ state, int* __restrict__ elapsed, unsigned* __restrict__ rng,
    unsigned* __restrict__ sample_rng, const float* __restrict__ w1, const float* __restrict__ b1,
    const float* __restrict__ w2, const float* __restrict__ b2, const float* __restrict__ w3,
    const float* __restrict__ b3, int* __restrict__ episodes, long long* __restrict__ episode_steps,
    float* __restrict__ obs_out, float* __restrict__ traj_obs, unsigned char* __restrict__ traj_action,
    float* __restrict__ traj_reward, unsigned char* __restrict__ traj_done, long long n) {
  using namespace rlscope_policy_mma;
  __shared__ __align__(8) float bias2[kHidden];
  for (int j = threadIdx.x; j < kHidden; j += blockDim.x) bias2[j] = b2[j];
  __syncthreads();
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const Fragments f = load_fragments(w1, b1, w2, w3, b3, g, t);

  const long long i = ((blockIdx.x * (long long)blockDim.x + threadIdx.x) >> 5) * kTile + g + 8 * (t & 1);
  const bool writer = i < n && t < 2;  // lanes t = 2, 3 step copies of t = 0, 1
  Collector env;
  env.load<SAMPLE>(state, elapsed, rng, sample_rng, i, n);
#pragma unroll 1
  for (int k = 0; k < K; ++k) {
    const float o[kObs] = {env.s.x, env.s.x_dot, env.s.theta, env.s.theta_dot};
    const float margin = margin_mma(f, bias2, o, t);
    const bool right = SAMPLE ? sample_right(margin, env.gen) : margin > 0.0f;
    env.advance(right, k, RECORD && writer, i, n, traj_obs, traj_action, traj_reward, traj_done);
  }
  if (writer) env.store<SAMPLE>(state, elapsed, rng, sample_rng, episodes, episode_steps, obs_out, i, n);
}
