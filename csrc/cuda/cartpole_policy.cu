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
