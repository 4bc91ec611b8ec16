"""The jitted PPO (experiments/casestudies/jitted_ppo.py): learning on a rollout recorded outside
the jitted step (what the fused CUDA kernel's rollout feeds it) is the step's own learning; brax's
environments; and, on a GPU, the fused rollout kernel reading JAX's parameters.

Each check runs in a process of its own: with optax imported in pytest's process, a later test
crashed writing to a closed stderr (tests/test_jitted_training.py says more)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from rlscope.errors import SKIPPED_EXIT
from tests.conftest import REPO


def _run(script: str, timeout: float = 600) -> dict:
    missing = [name for name in ("jax", "optax") if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(f"needs {' and '.join(missing)}: pip install 'rlscope[jax]'")
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


_LEARN_ON_RECORDED = """
import json, os
os.environ["JAX_PLATFORMS"] = "cpu"
import jax, numpy as np
from experiments.casestudies.jitted_envs import make_env
from experiments.casestudies.jitted_ppo import HYPERPARAMETERS, make_ppo
ppo = make_ppo(make_env("cartpole", 8), 16, **HYPERPARAMETERS)
params, opt_state, state, key = ppo.init(3)
(whole_params, _, _, _), whole_loss = ppo.train_step((params, opt_state, state, key))
after, key_after, (obs, action, logp, value, reward, done) = ppo.rollout(params, state, key)
learned_params, _, _, learned_loss = ppo.learn(params, opt_state, key_after, obs, action, reward, done,
                                               after[0])
difference = max(float(np.abs(np.asarray(whole_params[k]) - np.asarray(learned_params[k])).max())
                 for k in whole_params)
moved = max(float(np.abs(np.asarray(whole_params[k]) - np.asarray(params[k])).max()) for k in params)
print(json.dumps({"whole": float(whole_loss), "learned": float(learned_loss), "difference": difference,
                  "moved": moved, "shapes": [list(obs.shape), list(action.shape), list(done.shape)]}))
"""


def test_learning_on_a_recorded_rollout_is_the_jitted_step_s_learning() -> None:
    """The step's rollout handed to ``learn`` as recorded steps (observation, action, reward,
    done; log-probabilities and values computed again in one batch) gives the step's loss and
    parameters, up to float rounding."""
    result = _run(_LEARN_ON_RECORDED)
    assert result["shapes"] == [[16, 8, 4], [16, 8], [16, 8]]
    assert result["learned"] == pytest.approx(result["whole"], rel=1e-4)
    assert result["moved"] > 1e-4  # the update changed the parameters, so the comparison means something
    assert result["difference"] < 1e-3 * result["moved"]


_BRAX_STEP = """
import json, os
os.environ["JAX_PLATFORMS"] = "cpu"
import numpy as np
from experiments.casestudies.jitted_envs import make_env
from experiments.casestudies.jitted_ppo import HYPERPARAMETERS, make_ppo
env = make_env("inverted_pendulum", 4)
ppo = make_ppo(env, 8, **HYPERPARAMETERS)
carry = ppo.init(0)
_, _, (obs, action, logp, value, reward, done) = ppo.rollout(carry[0], carry[2], carry[3])
carry, loss = ppo.train_step(carry)
print(json.dumps({"loss": float(loss), "action": list(action.shape), "obs": list(obs.shape),
                  "obs_size": env.obs_size, "action_size": env.action_size, "discrete": env.discrete,
                  "log_std": np.asarray(carry[0]["log_std"]).tolist(), "logp_finite": bool(np.isfinite(logp).all()),
                  "reward_varies": bool(np.asarray(reward).std() > 0)}))
"""


def test_a_brax_environment_trains_with_a_gaussian_policy() -> None:
    if importlib.util.find_spec("brax") is None:
        pytest.skip("needs brax: pip install brax")
    result = _run(_BRAX_STEP, timeout=900)
    assert not result["discrete"] and result["action_size"] == 1
    assert result["obs"] == [8, 4, result["obs_size"]] and result["action"] == [8, 4, 1]
    assert result["logp_finite"] and result["loss"] == result["loss"]  # not NaN
    assert result["log_std"] != [0.0]  # the Gaussian's spread is learned


def test_an_unknown_environment_is_one_line_naming_the_known_ones() -> None:
    if importlib.util.find_spec("brax") is None or importlib.util.find_spec("jax") is None:
        pytest.skip("needs brax and jax")
    done = subprocess.run([sys.executable, "-m", "experiments.casestudies.jitted_ppo", "--env", "CartPole",
                           "--device", "cpu"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "unknown brax environment 'CartPole'" in done.stderr and "cartpole (ours)" in done.stderr


def test_the_fused_rollout_is_refused_off_cartpole_and_skipped_on_the_cpu() -> None:
    command = [sys.executable, "-m", "experiments.casestudies.jitted_ppo", "--envs", "8", "--steps", "8",
               "--iterations", "3", "--device", "cpu", "--rollout", "fused"]
    done = subprocess.run([*command, "--env", "ant"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "CartPole only" in done.stderr
    if importlib.util.find_spec("jax") is None:
        pytest.skip("needs jax")
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == SKIPPED_EXIT and "GPU only" in done.stderr.splitlines()[-1]


_FUSED_ARGMAX = """
import json
import jax, numpy as np
from experiments.casestudies.fused_rollout import FusedRollout
from experiments.casestudies.jitted_envs import make_env
from experiments.casestudies.jitted_ppo import _forward, make_ppo, HYPERPARAMETERS
ppo = make_ppo(make_env("cartpole", 4096), 32, **HYPERPARAMETERS)
params = ppo.init(1)[0]
fused = FusedRollout(4096, seed=1)
fused.kernel.sample = False  # argmax actions: comparable with JAX's logits on the same observations
obs, action, reward, done, last = fused.rollout(params, 32)
with jax.default_matmul_precision("highest"):  # FP32 as the kernel's, not TF32
    logits = np.asarray(_forward(jax.numpy, params, obs)[0])
margin = np.abs(logits[..., 1] - logits[..., 0])
clear = margin > 1e-4
agree = (np.asarray(action) == logits.argmax(-1))[clear].mean()
fused.kernel.sample = True
_, sampled, _, sampled_done, _ = fused.rollout(params, 32)
print(json.dumps({"agree": float(agree), "clear": float(clear.mean()), "shapes": [list(obs.shape), list(last.shape)],
                  "dtypes": [str(action.dtype), str(done.dtype)], "ends": int(np.asarray(sampled_done).sum()),
                  "sampled_right": float(np.asarray(sampled).mean())}))
"""


@pytest.mark.gpu
def test_the_fused_rollout_reads_jax_s_parameters_in_the_kernel_s_layout() -> None:
    """With argmax actions, the kernel's action at each recorded observation is the argmax of
    JAX's policy there: the weights crossed DLPack in the layout the kernel reads."""
    result = _run(_FUSED_ARGMAX)
    assert result["shapes"] == [[32, 4096, 4], [4096, 4]] and result["dtypes"] == ["int32", "bool"]
    assert result["clear"] > 0.9 and result["agree"] > 0.999
    assert 0.05 < result["sampled_right"] < 0.95 and result["ends"] > 0
