// CartPole-v1 dynamics (gymnasium semantics), stepped by a pool of worker threads.
//
// The state lives in one N x 4 row-major buffer that Python sees as a NumPy array without a
// copy. Every environment owns its own random stream, so results do not depend on the number
// of threads or on how environments are split between them.
#pragma once

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace rlscope {

struct CartPoleParams {
    static constexpr double gravity = 9.8;
    static constexpr double masscart = 1.0;
    static constexpr double masspole = 0.1;
    static constexpr double total_mass = masspole + masscart;
    static constexpr double length = 0.5;  // half the pole's length
    static constexpr double polemass_length = masspole * length;
    static constexpr double force_mag = 10.0;
    static constexpr double tau = 0.02;
    static constexpr double theta_threshold = 12.0 * 2.0 * 3.14159265358979323846 / 360.0;
    static constexpr double x_threshold = 2.4;
    static constexpr int32_t max_episode_steps = 500;
    static constexpr double reset_bound = 0.05;
};

// splitmix64: tiny, good enough for uniform resets, and one 64-bit word of state per env.
inline uint64_t splitmix64(uint64_t &s) {
    uint64_t z = (s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

inline double uniform01(uint64_t &s) { return (splitmix64(s) >> 11) * 0x1.0p-53; }

// Persistent workers: spawning threads every step would cost more than stepping small N.
class ThreadPool {
public:
    explicit ThreadPool(unsigned workers) {
        for (unsigned i = 0; i < workers; ++i)
            threads_.emplace_back([this, i] { loop(i + 1); });
    }
    ~ThreadPool() {
        {
            std::lock_guard<std::mutex> lock(mu_);
            stop_ = true;
            ++generation_;
        }
        wake_.notify_all();
        for (auto &t : threads_) t.join();
    }
    ThreadPool(const ThreadPool &) = delete;
    ThreadPool &operator=(const ThreadPool &) = delete;

    unsigned size() const { return static_cast<unsigned>(threads_.size()) + 1; }

    // Run task(part) for part in [0, parts); the calling thread takes part 0.
    void run(unsigned parts, const std::function<void(unsigned)> &task) {
        if (parts <= 1 || threads_.empty()) {
            for (unsigned p = 0; p < parts; ++p) task(p);
            return;
        }
        parts = std::min(parts, size());
        {
            std::lock_guard<std::mutex> lock(mu_);
            task_ = &task;
            parts_ = parts;
            pending_ = parts - 1;
            ++generation_;
        }
        wake_.notify_all();
        task(0);
        std::unique_lock<std::mutex> lock(mu_);
        done_.wait(lock, [this] { return pending_ == 0; });
        task_ = nullptr;
    }

private:
    void loop(unsigned part) {
        uint64_t seen = 0;
        for (;;) {
            const std::function<void(unsigned)> *task;
            {
                std::unique_lock<std::mutex> lock(mu_);
                wake_.wait(lock, [&] { return generation_ != seen; });
                seen = generation_;
                if (stop_) return;
                if (part >= parts_) continue;
                task = task_;
            }
            (*task)(part);
            {
                std::lock_guard<std::mutex> lock(mu_);
                if (--pending_ == 0) done_.notify_one();
            }
        }
    }

    std::vector<std::thread> threads_;
    std::mutex mu_;
    std::condition_variable wake_, done_;
    const std::function<void(unsigned)> *task_ = nullptr;
    unsigned parts_ = 0, pending_ = 0;
    uint64_t generation_ = 0;
    bool stop_ = false;
};

template <typename T>
class CartPole {
public:
    using P = CartPoleParams;

    CartPole(size_t num_envs, unsigned num_threads, uint64_t seed, size_t min_envs_per_thread)
        : n_(num_envs),
          min_envs_per_thread_(std::max<size_t>(1, min_envs_per_thread)),
          state_(num_envs * 4), final_state_(num_envs * 4), reward_(num_envs, 1.0f),
          terminated_(num_envs), truncated_(num_envs), elapsed_(num_envs), rng_(num_envs),
          pool_(num_threads > 1 ? num_threads - 1 : 0) {
        reset(seed);
    }

    size_t num_envs() const { return n_; }
    unsigned num_threads() const { return pool_.size(); }

    void reset(uint64_t seed) {
        for (size_t i = 0; i < n_; ++i) {
            rng_[i] = seed ^ (0xD1B54A32D192ED03ULL * (i + 1));
            reset_env(i);
        }
        std::fill(final_state_.begin(), final_state_.end(), T(0));
        std::fill(terminated_.begin(), terminated_.end(), 0);
        std::fill(truncated_.begin(), truncated_.end(), 0);
    }

    // One step of every environment; done environments are reset in the same step and their
    // pre-reset observation is kept in final_state.
    void step(const int64_t *actions) {
        const size_t parts = std::max<size_t>(1, std::min<size_t>(pool_.size(), n_ / min_envs_per_thread_));
        const size_t chunk = (n_ + parts - 1) / parts;
        pool_.run(static_cast<unsigned>(parts), [&](unsigned p) {
            const size_t begin = p * chunk, end = std::min(n_, begin + chunk);
            for (size_t i = begin; i < end; ++i) step_env(i, actions[i]);
        });
    }

    T *state() { return state_.data(); }
    T *final_state() { return final_state_.data(); }
    float *reward() { return reward_.data(); }
    uint8_t *terminated() { return terminated_.data(); }
    uint8_t *truncated() { return truncated_.data(); }
    int32_t *elapsed() { return elapsed_.data(); }

private:
    void reset_env(size_t i) {
        for (int k = 0; k < 4; ++k)
            state_[4 * i + k] = static_cast<T>(-P::reset_bound + 2 * P::reset_bound * uniform01(rng_[i]));
        elapsed_[i] = 0;
    }

    void step_env(size_t i, int64_t action) {
        T *s = &state_[4 * i];
        const T x = s[0], x_dot = s[1], theta = s[2], theta_dot = s[3];
        const T force = action == 1 ? T(P::force_mag) : T(-P::force_mag);
        const T costheta = std::cos(theta), sintheta = std::sin(theta);
        const T temp = (force + T(P::polemass_length) * theta_dot * theta_dot * sintheta) / T(P::total_mass);
        const T thetaacc = (T(P::gravity) * sintheta - costheta * temp) /
                           (T(P::length) * (T(4.0 / 3.0) - T(P::masspole) * costheta * costheta / T(P::total_mass)));
        const T xacc = temp - T(P::polemass_length) * thetaacc * costheta / T(P::total_mass);
        T *f = &final_state_[4 * i];
        f[0] = x + T(P::tau) * x_dot;
        f[1] = x_dot + T(P::tau) * xacc;
        f[2] = theta + T(P::tau) * theta_dot;
        f[3] = theta_dot + T(P::tau) * thetaacc;
        const bool term = f[0] < T(-P::x_threshold) || f[0] > T(P::x_threshold) ||
                          f[2] < T(-P::theta_threshold) || f[2] > T(P::theta_threshold);
        const int32_t elapsed = elapsed_[i] + 1;
        const bool trunc = elapsed >= P::max_episode_steps;  // as gymnasium's TimeLimit: may coincide with term
        terminated_[i] = term;
        truncated_[i] = trunc;
        if (term || trunc) {
            reset_env(i);
        } else {
            std::copy(f, f + 4, s);
            elapsed_[i] = elapsed;
        }
    }

    size_t n_, min_envs_per_thread_;
    std::vector<T> state_, final_state_;
    std::vector<float> reward_;
    std::vector<uint8_t> terminated_, truncated_;
    std::vector<int32_t> elapsed_;
    std::vector<uint64_t> rng_;
    ThreadPool pool_;
};

}  // namespace rlscope
