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
__device__ __forceinline__ bool sample_right(const float* l, unsigned& gen) {
  const float u = __uint2float_rn(rlscope_cartpole::next_random(gen) >> 8) * (1.0f / 16777216.0f);
  return u < 1.0f / (1.0f + expf(l[0] - l[1]));
}

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
  State s = rlscope_cartpole::load_mean<1>(state, n, i);
  int steps = elapsed[i];
  unsigned seed = rng[i];
  unsigned gen = SAMPLE ? sample_rng[i] : 0u;
  int finished = 0;
  long long finished_steps = 0;
#pragma unroll 1
  for (int k = 0; k < K; ++k) {
    float l[kActions];
    logits(weights, s, l);
    const bool right = SAMPLE ? sample_right(l, gen) : (l[1] > l[0]);
    if (RECORD) {
      const float o[kObs] = {s.x, s.x_dot, s.theta, s.theta_dot};
#pragma unroll
      for (int c = 0; c < kObs; ++c) traj_obs[((long long)k * kObs + c) * n + i] = o[c];
      traj_action[(long long)k * n + i] = right;
      traj_reward[(long long)k * n + i] = 1.0f;
    }
    s = rlscope_cartpole::physics<1, true>(s, right);
    ++steps;
    const bool done = rlscope_cartpole::terminated(s) | (steps >= rlscope_cartpole::kMaxEpisodeSteps);
    if (RECORD) traj_done[(long long)k * n + i] = done;
    if (done) {
      s = rlscope_cartpole::fresh_state(seed);
      ++finished;
      finished_steps += steps;
      steps = 0;
    }
  }
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

// ---------------------------------------------------------------------------------------------
// The same loop with the 64 x 64 layer on tensor cores: mma.sync m16n8k16, bf16 operands, fp32
// accumulators. A warp steps a tile of 16 environments. Lane l works on rows g = l / 4 and g + 8
// of the tile (the accumulator layout of mma), columns 8 j + 2 t and 8 j + 2 t + 1 of every
// 8-wide column tile j, t = l % 4. The four lanes of a quad hold the same two environments and
// step them identically (the physics is a few dozen flops), so no state moves between lanes;
// only the last layer's partial sums are reduced across the quad.
//
// The first layer (fp32, 4 inputs) is computed straight into the layout of layer 2's A operand
// (an accumulator tile pair is an A tile), tanh in bf16x2; layer 2's B operand (W2, 4 k-tiles x
// 8 column tiles, 64 registers) is loaded once per launch and kept in registers; layer 2's
// output takes tanh in fp32 and feeds layer 3 in fp32.

namespace rlscope_policy_mma {

constexpr int kTile = 16;  // environments per warp

struct Small {  // everything but W2, in shared memory
  float w1[kHidden][kObs];
  float b1[kHidden];
  float b2[kHidden];
  float w3[kActions][kHidden];
  float b3[kActions];
};

// bf16x2 of (lo, hi): lo in the lower half, the element of the lower column index.
__device__ __forceinline__ unsigned pack_bf16(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

__device__ __forceinline__ unsigned tanh_bf16x2(unsigned x) {
  unsigned r;
  asm("tanh.approx.bf16x2 %0, %1;" : "=r"(r) : "r"(x));
  return r;
}

__device__ __forceinline__ float tanh_approx(float x) {
  float r;
  asm("tanh.approx.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}

__device__ __forceinline__ void mma_bf16(float* d, const unsigned* a, const unsigned* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// First layer's pre-activation for rows (o0, o1) at columns c, c + 1.
__device__ __forceinline__ void layer1(const Small& w, const float* o0, const float* o1, int c, float* out) {
  float p[4] = {w.b1[c], w.b1[c + 1], w.b1[c], w.b1[c + 1]};
#pragma unroll
  for (int i = 0; i < kObs; ++i) {
    p[0] = fmaf(w.w1[c][i], o0[i], p[0]);
    p[1] = fmaf(w.w1[c + 1][i], o0[i], p[1]);
    p[2] = fmaf(w.w1[c][i], o1[i], p[2]);
    p[3] = fmaf(w.w1[c + 1][i], o1[i], p[3]);
  }
  out[0] = p[0], out[1] = p[1], out[2] = p[2], out[3] = p[3];
}

// Logits of the quad's two environments (l[0..1]: row g, l[2..3]: row g + 8), in every lane.
__device__ __forceinline__ void logits_mma(const Small& w, const unsigned (&b)[4][8][2], const float* o0,
                                           const float* o1, int t, float* l) {
  unsigned a[4][4];
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    float lo[4], hi[4];
    layer1(w, o0, o1, 16 * kk + 2 * t, lo);
    layer1(w, o0, o1, 16 * kk + 8 + 2 * t, hi);
    a[kk][0] = tanh_bf16x2(pack_bf16(lo[0], lo[1]));
    a[kk][1] = tanh_bf16x2(pack_bf16(lo[2], lo[3]));
    a[kk][2] = tanh_bf16x2(pack_bf16(hi[0], hi[1]));
    a[kk][3] = tanh_bf16x2(pack_bf16(hi[2], hi[3]));
  }
  float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int c = 8 * j + 2 * t;
    float d[4] = {w.b2[c], w.b2[c + 1], w.b2[c], w.b2[c + 1]};
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) mma_bf16(d, a[kk], b[kk][j]);
    const float h[4] = {tanh_approx(d[0]), tanh_approx(d[1]), tanh_approx(d[2]), tanh_approx(d[3])};
#pragma unroll
    for (int act = 0; act < kActions; ++act) {
      part[act] = fmaf(w.w3[act][c], h[0], fmaf(w.w3[act][c + 1], h[1], part[act]));
      part[2 + act] = fmaf(w.w3[act][c], h[2], fmaf(w.w3[act][c + 1], h[3], part[2 + act]));
    }
  }
#pragma unroll
  for (int v = 0; v < 4; ++v) {
    part[v] += __shfl_xor_sync(0xffffffffu, part[v], 1);
    part[v] += __shfl_xor_sync(0xffffffffu, part[v], 2);
  }
  l[0] = part[0] + w.b3[0], l[1] = part[1] + w.b3[1];
  l[2] = part[2] + w.b3[0], l[3] = part[3] + w.b3[1];
}

}  // namespace rlscope_policy_mma

// One environment's state and counters, as each lane of its quad holds them.
struct EnvSlot {
  rlscope_cartpole::State s;
  int steps;
  unsigned seed, gen;
  int finished;
  long long finished_steps;
  long long index;
  bool valid;
};

template <int RECORD, bool SAMPLE>
__device__ __forceinline__ void advance(EnvSlot& e, const float* l, int k, bool writer, long long n,
                                        float* __restrict__ traj_obs, unsigned char* __restrict__ traj_action,
                                        float* __restrict__ traj_reward, unsigned char* __restrict__ traj_done) {
  const bool right = SAMPLE ? rlscope_policy::sample_right(l, e.gen) : (l[1] > l[0]);
  const bool store = RECORD && writer && e.valid;
  if (store) {
    const float o[kObs] = {e.s.x, e.s.x_dot, e.s.theta, e.s.theta_dot};
#pragma unroll
    for (int c = 0; c < kObs; ++c) traj_obs[((long long)k * kObs + c) * n + e.index] = o[c];
    traj_action[(long long)k * n + e.index] = right;
    traj_reward[(long long)k * n + e.index] = 1.0f;
  }
  e.s = rlscope_cartpole::physics<1, true>(e.s, right);
  ++e.steps;
  const bool done = rlscope_cartpole::terminated(e.s) | (e.steps >= rlscope_cartpole::kMaxEpisodeSteps);
  if (store) traj_done[(long long)k * n + e.index] = done;
  if (done) {
    e.s = rlscope_cartpole::fresh_state(e.seed);
    ++e.finished;
    e.finished_steps += e.steps;
    e.steps = 0;
  }
}

template <bool SAMPLE>
__device__ __forceinline__ EnvSlot load_env(const float* state, const int* elapsed, const unsigned* rng,
                                            const unsigned* sample_rng, long long index, long long n) {
  EnvSlot e{};
  e.index = index;
  e.valid = index < n;
  if (e.valid) {
    e.s = rlscope_cartpole::load_mean<1>(state, n, index);
    e.steps = elapsed[index];
    e.seed = rng[index];
    e.gen = SAMPLE ? sample_rng[index] : 0u;
  } else {
    e.s = {0.0f, 0.0f, 0.0f, 0.0f};
    e.seed = 1u;  // a padding row: stepped like the others, never stored
  }
  return e;
}

template <bool SAMPLE>
__device__ __forceinline__ void store_env(const EnvSlot& e, float* state, int* elapsed, unsigned* rng,
                                          unsigned* sample_rng, int* episodes, long long* episode_steps,
                                          float* obs_out, long long n) {
  if (!e.valid) return;
  const float o[kObs] = {e.s.x, e.s.x_dot, e.s.theta, e.s.theta_dot};
#pragma unroll
  for (int c = 0; c < kObs; ++c) {
    state[c * n + e.index] = o[c];
    obs_out[e.index * kObs + c] = o[c];
  }
  elapsed[e.index] = e.steps;
  rng[e.index] = e.seed;
  if (SAMPLE) sample_rng[e.index] = e.gen;
  episodes[e.index] += e.finished;
  episode_steps[e.index] += e.finished_steps;
}

// Same arguments and outputs as cartpole_policy_collect; launch ceil(n / 16) warps.
template <int K, int RECORD, bool SAMPLE>
__global__ void __launch_bounds__(256) cartpole_policy_collect_mma(
    float* __restrict__ state, int* __restrict__ elapsed, unsigned* __restrict__ rng,
    unsigned* __restrict__ sample_rng, const float* __restrict__ w1, const float* __restrict__ b1,
    const float* __restrict__ w2, const float* __restrict__ b2, const float* __restrict__ w3,
    const float* __restrict__ b3, int* __restrict__ episodes, long long* __restrict__ episode_steps,
    float* __restrict__ obs_out, float* __restrict__ traj_obs, unsigned char* __restrict__ traj_action,
    float* __restrict__ traj_reward, unsigned char* __restrict__ traj_done, long long n) {
  using namespace rlscope_policy_mma;
  __shared__ Small small;
  for (int j = threadIdx.x; j < kHidden * kObs; j += blockDim.x) (&small.w1[0][0])[j] = w1[j];
  for (int j = threadIdx.x; j < kActions * kHidden; j += blockDim.x) (&small.w3[0][0])[j] = w3[j];
  for (int j = threadIdx.x; j < kHidden; j += blockDim.x) {
    small.b1[j] = b1[j];
    small.b2[j] = b2[j];
  }
  if (threadIdx.x < kActions) small.b3[threadIdx.x] = b3[threadIdx.x];
  __syncthreads();

  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  // W2 as B fragments: B[k][n] = W2[n][k]; lane holds n = 8 j + g, k = 16 kk + 2 t (+1) and + 8 (+1).
  unsigned b[4][8][2];
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float* row = w2 + (8 * j + g) * kHidden + 16 * kk + 2 * t;
      b[kk][j][0] = pack_bf16(row[0], row[1]);
      b[kk][j][1] = pack_bf16(row[8], row[9]);
    }
  }
  const long long base = ((blockIdx.x * (long long)blockDim.x + threadIdx.x) >> 5) * kTile;
  EnvSlot e0 = load_env<SAMPLE>(state, elapsed, rng, sample_rng, base + g, n);
  EnvSlot e1 = load_env<SAMPLE>(state, elapsed, rng, sample_rng, base + g + 8, n);
#pragma unroll 1
  for (int k = 0; k < K; ++k) {
    const float o0[kObs] = {e0.s.x, e0.s.x_dot, e0.s.theta, e0.s.theta_dot};
    const float o1[kObs] = {e1.s.x, e1.s.x_dot, e1.s.theta, e1.s.theta_dot};
    float l[4];
    logits_mma(small, b, o0, o1, t, l);
    advance<RECORD, SAMPLE>(e0, l, k, t == 0, n, traj_obs, traj_action, traj_reward, traj_done);
    advance<RECORD, SAMPLE>(e1, l + 2, k, t == 1, n, traj_obs, traj_action, traj_reward, traj_done);
  }
  if (t == 0) store_env<SAMPLE>(e0, state, elapsed, rng, sample_rng, episodes, episode_steps, obs_out, n);
  if (t == 1) store_env<SAMPLE>(e1, state, elapsed, rng, sample_rng, episodes, episode_steps, obs_out, n);
}
