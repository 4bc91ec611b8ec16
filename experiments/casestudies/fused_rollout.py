"""The jitted PPO's rollout in the fused CUDA simulator+policy kernel
(``experiments.datacollection.backends.cuda_fused_policy``): an iteration's steps of CartPole and
policy inference in one launch, the policy's weights read from JAX's parameters and the
recorded steps handed back to JAX through DLPack, without copies through the host.

The kernel samples actions from the policy (``sample=True``) and records each step's observation,
action, reward and done; PPO's log-probabilities and values of those steps are computed after, in
one batch inside the jitted learning (``jitted_ppo.make_ppo``'s ``learn``). The kernel runs
our CartPole with the same physics, resets and 500-step cut-off as the JAX one, on its own random
streams.
"""

from __future__ import annotations

from typing import Any

__all__ = ["FusedRollout"]


class FusedRollout:
    """``rollout(params, steps)`` -> (obs, action, reward, done) of shape (steps, envs[, 4]) and the
    observations after the last step, as JAX arrays; CUDA only (SkipRun without CuPy or a GPU)."""

    def __init__(self, envs: int, seed: int) -> None:
        import jax

        from experiments.datacollection.backends.cuda_fused_policy import CudaFusedPolicy

        self.kernel = CudaFusedPolicy(envs, seed, device="cuda", sample=True, record=True)
        self.kernel.reset()
        self.cp, self.jax = self.kernel.cp, jax
        # torch's layout (weight[out][in]), as the kernel reads it; XLA's outputs are dense row-major.
        self._torch_layout = jax.jit(lambda p: [p["pi_w0"].T, p["pi_b0"], p["pi_w1"].T, p["pi_b1"], p["pi_w2"].T,
                                                p["pi_b2"]])
        # Each output a new buffer (reward + 0: jit hands an input returned as it is straight back).
        self._to_jax = jax.jit(lambda obs, action, reward, done: (
            obs.transpose(0, 2, 1), action.astype("int32"), reward + 0.0, done.astype(bool)))

    def rollout(self, params: dict[str, Any], steps: int) -> tuple[Any, ...]:
        cp, jax = self.cp, self.jax
        # Ready before the kernel reads them: the launch goes on CuPy's stream, not JAX's.
        weights = [cp.from_dlpack(w) for w in jax.block_until_ready(self._torch_layout(params))]
        self.kernel.collect(weights, steps)
        # The recorded arrays are read by JAX on its own stream: the launch must be done first.
        cp.cuda.get_current_stream().synchronize()
        recorded = [jax.dlpack.from_dlpack(self.kernel.trajectory[k]) for k in ("obs", "action", "reward", "done")]
        # Copies (transposed, cast) taken before the next launch writes the same buffers again.
        return (*self._to_jax(*recorded), jax.numpy.array(jax.dlpack.from_dlpack(self.kernel.obs)))
