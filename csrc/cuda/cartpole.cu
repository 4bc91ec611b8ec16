// CartPole-v1 on the GPU, one thread per environment, compiled at run time by NVRTC (CuPy).
//
// Semantics follow gymnasium CartPole-v1 in float32 (DESIGN.md): explicit Euler on the old
// values, strict termination thresholds, reward 1 every step, 500-step truncation and same-step
// autoreset to uniform(-0.05, 0.05).
//
// Template knobs (paper "Optimizing Data Collection", section 4):
//   K  simulation steps fused into one launch (K = 1 is the unfused baseline);
//   S  state factor: an environment holds S slots of 4 floats (S x the loads and stores per
//      step). The physics acts on the slots' mean and adds its increment to every slot, so the
//      mean follows CartPole exactly and S = 1 is CartPole itself;
//   C  compute factor: each step integrates C Euler sub-steps of tau / C (C x the arithmetic);
//   PRECISE  true: sin/cos by a short polynomial on CartPole's angle range (|theta| < 0.5,
//      libm otherwise) and IEEE division; false: the hardware approximations (__sincosf,
//      __fdividef), a few ulp looser.
//
// Layout is structure-of-arrays so that neighbouring threads touch neighbouring words:
// state[(slot * 4 + component) * n + env].

namespace rlscope_cartpole {

constexpr float kGravity = 9.8f;
constexpr float kMassCart = 1.0f;
constexpr float kMassPole = 0.1f;
constexpr float kTotalMass = kMassCart + kMassPole;
constexpr float kLength = 0.5f;
constexpr float kPoleMassLength = kMassPole * kLength;
constexpr float kForceMag = 10.0f;
constexpr float kTau = 0.02f;
constexpr float kThetaThreshold = 12.0f * 2.0f * 3.14159265358979323846f / 360.0f;
constexpr float kXThreshold = 2.4f;
constexpr int kMaxEpisodeSteps = 500;

struct State {
  float x, x_dot, theta, theta_dot;
};

// xorshift32: one 32-bit word per environment; cheap and good enough to pick actions and resets.
__device__ __forceinline__ unsigned next_random(unsigned& s) {
  s ^= s << 13;
  s ^= s >> 17;
  s ^= s << 5;
  return s;
}

// Random actions: 31 bits of one draw serve 31 steps. The unused bits stay in a second word per
// environment (above a sentinel 1 bit), so K launches of one step and one launch of K steps see
// the same actions and the same resets.
__device__ __forceinline__ unsigned refill_bits(unsigned& seed, unsigned bits) {
  return bits <= 1u ? next_random(seed) | 0x80000000u : bits;
}

// 16 random bits -> uniform in [-0.05, 0.05) on a grid of 0.1 / 65536.
__device__ __forceinline__ float reset_value(unsigned bits16) {
  return fmaf(__uint2float_rn(bits16), 0.1f / 65536.0f, -0.05f);
}

__device__ __forceinline__ State fresh_state(unsigned& rng) {
  const unsigned a = next_random(rng), b = next_random(rng);
  return {reset_value(a & 0xffffu), reset_value(a >> 16), reset_value(b & 0xffffu), reset_value(b >> 16)};
}

template <bool PRECISE>
__device__ __forceinline__ void sin_cos(float theta, float* s, float* c) {
  if (!PRECISE) {
    __sincosf(theta, s, c);
  } else if (fabsf(theta) < 0.5f) {
    // Taylor series to x^11 / x^12: error below 1e-11 on |theta| < 0.5, so float-rounded.
    const float t2 = theta * theta;
    *s = theta * fmaf(t2, fmaf(t2, fmaf(t2, fmaf(t2, fmaf(t2, -2.5052108e-8f, 2.7557319e-6f), -1.9841270e-4f),
                                        8.3333333e-3f), -1.6666667e-1f), 1.0f);
    *c = fmaf(t2, fmaf(t2, fmaf(t2, fmaf(t2, fmaf(t2, 2.0876757e-9f, -2.7557319e-7f), 2.4801587e-5f),
                                -1.3888889e-3f), 4.1666667e-2f), -0.5f) * t2 + 1.0f;
  } else {
    sincosf(theta, s, c);
  }
}

// The one true division of a step. Divisions by constants are multiplications by their
// reciprocals (computed at compile time) in both modes.
template <bool PRECISE>
__device__ __forceinline__ float divide(float a, float b) {
  if (PRECISE) return a / b;
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(b));
  return a * r;
}

constexpr float kInvTotalMass = 1.0f / kTotalMass;
// gymnasium's constant sub-expressions folded (the compiler may not reassociate float math):
// length * (4/3 - masspole * cos^2 / total_mass) = kDenomA - kDenomB * cos^2.
constexpr float kDenomA = kLength * 4.0f / 3.0f;
constexpr float kDenomB = kLength * kMassPole / kTotalMass;
constexpr float kPoleMassLengthPerMass = kPoleMassLength / kTotalMass;

// One explicit-Euler step of length tau, exactly gymnasium's order of operations.
template <bool PRECISE>
__device__ __forceinline__ State euler(State s, float force, float tau) {
  float sintheta, costheta;
  sin_cos<PRECISE>(s.theta, &sintheta, &costheta);
  const float temp = (force + kPoleMassLength * s.theta_dot * s.theta_dot * sintheta) * kInvTotalMass;
  const float thetaacc = divide<PRECISE>(kGravity * sintheta - costheta * temp,
                                         kDenomA - kDenomB * costheta * costheta);
  const float xacc = temp - kPoleMassLengthPerMass * (thetaacc * costheta);
  return {s.x + tau * s.x_dot, s.x_dot + tau * xacc, s.theta + tau * s.theta_dot, s.theta_dot + tau * thetaacc};
}

template <int C, bool PRECISE>
__device__ __forceinline__ State physics(State s, bool push_right) {
  const float force = push_right ? kForceMag : -kForceMag;
#pragma unroll 1
  for (int i = 0; i < C; ++i) s = euler<PRECISE>(s, force, kTau / C);
  return s;
}

// Strict thresholds, as gymnasium (|v| > t is v < -t or v > t for every non-NaN v). Bitwise |,
// not ||: both tests are cheaper than a branch between them.
__device__ __forceinline__ bool terminated(const State& s) {
  return (fabsf(s.x) > kXThreshold) | (fabsf(s.theta) > kThetaThreshold);
}

template <int S>
__device__ __forceinline__ State load_mean(const float* state, long long n, long long i) {
  float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll(S < 8 ? S : 8)
  for (int slot = 0; slot < S; ++slot)
    for (int c = 0; c < 4; ++c) sum[c] += state[(slot * 4 + c) * n + i];
  if (S == 1) return {sum[0], sum[1], sum[2], sum[3]};
  return {sum[0] / S, sum[1] / S, sum[2] / S, sum[3] / S};
}

// Every slot moves by the mean's increment; after a reset all slots hold the fresh state.
template <int S>
__device__ __forceinline__ void store_slots(float* state, long long n, long long i, State start, State end,
                                            bool was_reset) {
  const float end_v[4] = {end.x, end.x_dot, end.theta, end.theta_dot};
  if (S == 1 || was_reset) {
#pragma unroll(S < 8 ? S : 8)
    for (int slot = 0; slot < S; ++slot)
      for (int c = 0; c < 4; ++c) state[(slot * 4 + c) * n + i] = end_v[c];
    return;
  }
  const float delta[4] = {end.x - start.x, end.x_dot - start.x_dot, end.theta - start.theta,
                          end.theta_dot - start.theta_dot};
#pragma unroll(S < 8 ? S : 8)
  for (int slot = 0; slot < S; ++slot)
    for (int c = 0; c < 4; ++c) state[(slot * 4 + c) * n + i] += delta[c];
}

}  // namespace rlscope_cartpole

using namespace rlscope_cartpole;

// Simulation only: K steps with uniformly random actions in one launch; counts finished episodes.
// rng holds two words per environment: the xorshift state (rng[i]) and unused action bits
// (rng[n + i]).
template <int K, int S, int C, bool PRECISE>
__global__ void __launch_bounds__(256) cartpole_simulate(float* __restrict__ state, int* __restrict__ elapsed,
                                                          unsigned* __restrict__ rng, int* __restrict__ episodes,
                                                          long long n) {
  const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i >= n) return;
  const State start = load_mean<S>(state, n, i);
  State s = start;
  int steps = elapsed[i];
  unsigned seed = rng[i];
  unsigned action_bits = rng[n + i];
  int finished = 0;
  bool was_reset = false;
  // Blocks of steps that need no new random bits, so the refill is not issued every step.
  for (int k = 0; k < K;) {
    action_bits = refill_bits(seed, action_bits);
    const int block = min(31 - __clz(action_bits), K - k);
    k += block;
#pragma unroll 4
    for (int j = 0; j < block; ++j) {
      s = physics<C, PRECISE>(s, action_bits & 1u);
      action_bits >>= 1;
      ++steps;
      if (terminated(s) | (steps >= kMaxEpisodeSteps)) {
        s = fresh_state(seed);
        steps = 0;
        ++finished;
        was_reset = true;
      }
    }
  }
  store_slots<S>(state, n, i, start, s, was_reset);
  elapsed[i] = steps;
  rng[i] = seed;
  rng[n + i] = action_bits;
  episodes[i] += finished;
}

// One step with the policy's actions, for the data-collection loop. Writes the observation
// (the slots' mean, after autoreset) and the pre-reset observation row-major (N x 4), as the
// policy and the Transition want them.
template <int S, int C, bool PRECISE>
__global__ void __launch_bounds__(256) cartpole_step(float* __restrict__ state, int* __restrict__ elapsed,
                                                      unsigned* __restrict__ rng,
                                                      const long long* __restrict__ actions,
                                                      float* __restrict__ obs, float* __restrict__ final_obs,
                                                      bool* __restrict__ terminated_out,
                                                      bool* __restrict__ truncated_out, long long n) {
  const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i >= n) return;
  const State start = load_mean<S>(state, n, i);
  const State end = physics<C, PRECISE>(start, actions[i] == 1);
  const bool term = terminated(end);
  int steps = elapsed[i] + 1;
  const bool trunc = steps >= kMaxEpisodeSteps;
  State next = end;
  if (term || trunc) {
    unsigned seed = rng[i];
    next = fresh_state(seed);
    rng[i] = seed;
    steps = 0;
  }
  store_slots<S>(state, n, i, start, next, term || trunc);
  elapsed[i] = steps;
  terminated_out[i] = term;
  truncated_out[i] = trunc;
  const float f[4] = {end.x, end.x_dot, end.theta, end.theta_dot};
  const float o[4] = {next.x, next.x_dot, next.theta, next.theta_dot};
  for (int c = 0; c < 4; ++c) {
    final_obs[i * 4 + c] = f[c];
    obs[i * 4 + c] = o[c];
  }
}

// Fill every environment with a fresh reset state and seed its generator (splitmix-style hash
// of seed and index, never zero, which xorshift would keep forever).
template <int S>
__global__ void cartpole_reset(float* __restrict__ state, int* __restrict__ elapsed, unsigned* __restrict__ rng,
                               unsigned long long seed, long long n) {
  const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i >= n) return;
  unsigned long long z = seed * 0x9e3779b97f4a7c15ull + (unsigned long long)i + 1ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  unsigned r = (unsigned)z | 1u;
  const State fresh = fresh_state(r);
  const float v[4] = {fresh.x, fresh.x_dot, fresh.theta, fresh.theta_dot};
  for (int slot = 0; slot < S; ++slot)
    for (int c = 0; c < 4; ++c) state[(slot * 4 + c) * n + i] = v[c];
  elapsed[i] = 0;
  rng[i] = r;
  rng[n + i] = 0u;
}
