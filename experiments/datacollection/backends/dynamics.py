"""CartPole dynamics written once for NumPy, PyTorch and JAX (``xp`` is the array module).

Also the simulator-complexity knobs of the paper's section 4.2, shared with the CUDA kernels
(``csrc/cuda/cartpole.cu``):

* state factor S: an environment holds S slots of 4 values (S x the loads and stores per
  step). The physics acts on the slots' mean and adds its increment to every slot, so the mean
  follows CartPole and S = 1 is CartPole itself.
* compute factor C: a step integrates C Euler sub-steps of tau / C (C x the arithmetic);
  C = 1 is CartPole itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from experiments.datacollection.backends.base import CARTPOLE as P

__all__ = ["cartpole_dynamics", "terminated_mask", "substeps", "slots_step"]


def cartpole_dynamics(state: Any, push_right: Any, xp: Any = np, tau: float = P.tau) -> Any:
    """One explicit-Euler step of gymnasium's CartPole for N x 4 states, in gymnasium's order."""
    x, x_dot, theta, theta_dot = state[:, 0], state[:, 1], state[:, 2], state[:, 3]
    force = xp.where(push_right, P.force_mag, -P.force_mag)
    costheta = xp.cos(theta)
    sintheta = xp.sin(theta)
    temp = (force + P.polemass_length * theta_dot * theta_dot * sintheta) / P.total_mass
    thetaacc = (P.gravity * sintheta - costheta * temp) / (
        P.length * (4.0 / 3.0 - P.masspole * costheta * costheta / P.total_mass)
    )
    xacc = temp - P.polemass_length * thetaacc * costheta / P.total_mass
    return xp.stack((x + tau * x_dot, x_dot + tau * xacc, theta + tau * theta_dot, theta_dot + tau * thetaacc), 1)


def terminated_mask(state: Any) -> Any:
    """Strict thresholds on position and angle, as gymnasium."""
    x, theta = state[:, 0], state[:, 2]
    return (x < -P.x_threshold) | (x > P.x_threshold) | (theta < -P.theta_threshold) | (theta > P.theta_threshold)


def substeps(state: Any, push_right: Any, compute_factor: int, xp: Any = np) -> Any:
    """A step as ``compute_factor`` Euler sub-steps of tau / C (a Python loop: C x the calls)."""
    tau = P.tau / compute_factor
    for _ in range(compute_factor):
        state = cartpole_dynamics(state, push_right, xp, tau)
    return state


def slots_step(slots: Any, advance: Callable[[Any], Any]) -> tuple[Any, Any]:
    """Step N x S x 4 slots whose mean ``advance`` moves one step; return (the new mean, the
    slots moved by its increment). With S = 1 the slot is the state and is stepped directly."""
    if slots.shape[1] == 1:
        mean = advance(slots[:, 0])
        return mean, mean[:, None]
    start = slots.mean(1)
    mean = advance(start)
    return mean, slots + (mean - start)[:, None]
