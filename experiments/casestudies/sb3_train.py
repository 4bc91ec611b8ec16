"""Train a Stable-Baselines3 algorithm on a gymnasium environment, annotated for rlscope.

    python -m experiments.casestudies.sb3_train ALGORITHM ENV_ID TIMESTEPS DEVICE [--learning-starts N]
        [--n-envs N] [--subproc] [--framework sb3|sb3_compile|sbx] [--hyperparameters zoo|cartpole]

The case studies' training script (RL-Scope §2.5.1-2.5.3): ``model.learn(..., callback=
rlscope.integrations.sb3.Annotate())``, nothing else rlscope-specific. Hyperparameters are
rl-zoo3's for MuJoCo (copied here, see ``HYPERPARAMETERS``) so each algorithm runs as its users
would run it, and the same in every framework (``experiments.casestudies.frameworks``);
``--hyperparameters cartpole`` gives PPO CleanRL's and PureJaxRL's CartPole settings instead, those
of the fully jitted PPO it is compared with (``experiments.casestudies.jitted_ppo``);
``--learning-starts`` shortens the off-policy algorithms' random warm-up for short runs. A missing
simulator or framework exits with ``SKIPPED_EXIT`` and the ``pip install`` that fixes it. The last
line printed is ``learn_s=SECONDS``, the wall time of ``model.learn`` (the uninstrumented
baseline of a profiled run).
"""

from __future__ import annotations

import argparse
import difflib
import sys
import time
from typing import Any

from experiments.casestudies.frameworks import COMPILABLE, FRAMEWORKS, INSTALL as FRAMEWORK_INSTALL
from experiments.casestudies.frameworks import algorithm_class, framework_problem, prepare
from rlscope.errors import SKIPPED_EXIT

LEARN_PREFIX = "learn_s="  # the line that reports model.learn's wall time

# rl-zoo3's MuJoCo hyperparameters (hyperparams/*.yml, MuJoCo sections): PPO's tuned Walker2d
# values; A2C, SAC, TD3 and DDPG the zoo's MuJoCo defaults. "normalize" wraps the VecEnv in
# VecNormalize, as the zoo does.
HYPERPARAMETERS: dict[str, dict[str, Any]] = {
    "ppo": {"normalize": True, "n_steps": 512, "batch_size": 32, "gamma": 0.99, "learning_rate": 5.05041e-05,
            "ent_coef": 0.000585045, "clip_range": 0.1, "n_epochs": 20, "gae_lambda": 0.95, "max_grad_norm": 1.0,
            "vf_coef": 0.871923},
    "a2c": {"normalize": True},
    "sac": {"learning_starts": 10000},
    "td3": {"learning_starts": 10000, "noise_std": 0.1, "train_freq": 1, "gradient_steps": 1,
            "learning_rate": 1e-3, "batch_size": 256, "net_arch": [400, 300]},
    "ddpg": {"learning_starts": 10000, "noise_std": 0.1, "train_freq": 1, "gradient_steps": 1,
             "learning_rate": 1e-3, "batch_size": 256, "net_arch": [400, 300]},
}
ALGORITHMS = tuple(HYPERPARAMETERS)
# Simulators that are optional extras, by the environment ids that need them: the install that fixes a missing one.
INSTALL = {"ALE/": "pip install 'rlscope[sims]'  (ale-py: the Arcade Learning Environment, ROMs included)",
           "": "pip install 'rlscope[sims]'  (mujoco: gymnasium's MuJoCo environments)"}


def env_problem(env_id: str) -> str | None:
    """Why ``env_id`` names no gymnasium environment (with a did-you-mean), or None. An ALE id
    passes while ale-py is not installed: that run is skipped with the install, not refused."""
    import gymnasium as gym

    if env_id.startswith("ALE/"):
        try:
            import ale_py
        except ImportError:
            return None
        gym.register_envs(ale_py)
    if env_id in gym.envs.registry:
        return None
    close = difflib.get_close_matches(env_id, list(gym.envs.registry), n=3)
    return f"no gymnasium environment {env_id!r}" + (f"; did you mean {', '.join(map(repr, close))}?" if close else "")


def cartpole_ppo(n_envs: int) -> dict[str, Any]:
    """``jitted_ppo.HYPERPARAMETERS`` in SB3's terms: 128-step rollouts, 4 minibatches, 4 epochs.
    SB3's and SBX's PPO networks are tanh 64x64 by default, as jitted_ppo's (there one trunk
    shared by policy and value, here one each)."""
    from experiments.casestudies.jitted_ppo import HYPERPARAMETERS as H

    steps = 128
    return {"n_steps": steps, "batch_size": steps * n_envs // H["minibatches"], "n_epochs": H["epochs"],
            "learning_rate": H["lr"], "gamma": H["gamma"], "gae_lambda": H["lam"], "clip_range": H["clip"],
            "ent_coef": H["ent_coef"], "vf_coef": H["vf_coef"], "max_grad_norm": H["max_grad_norm"]}


def make_model(algorithm: str, env_id: str, device: str, learning_starts: int | None = None, n_envs: int = 1,
               subproc: bool = False, seed: int = 0, framework: str = "sb3", hyperparameters: str = "zoo") -> Any:
    """The ``framework``'s model with rl-zoo3's hyperparameters (``hyperparameters="cartpole"``:
    ``cartpole_ppo``'s), on a vectorised ``env_id``."""
    import gymnasium as gym
    import numpy as np
    from stable_baselines3.common.env_util import make_atari_env, make_vec_env
    from stable_baselines3.common.noise import NormalActionNoise
    from stable_baselines3.common.vec_env import SubprocVecEnv, VecFrameStack, VecNormalize

    from rlscope.integrations.sb3 import SimulationWrapper

    params = cartpole_ppo(n_envs) if hyperparameters == "cartpole" else dict(HYPERPARAMETERS[algorithm])
    normalize = params.pop("normalize", False)
    vec_env_cls = SubprocVecEnv if subproc else None
    wrapper = SimulationWrapper if subproc else None  # the children's steps are theirs to annotate
    if env_id.startswith("ALE/"):
        import ale_py

        gym.register_envs(ale_py)
        env = VecFrameStack(make_atari_env(env_id, n_envs=n_envs, seed=seed, vec_env_cls=vec_env_cls), n_stack=4)
        policy = "CnnPolicy"
    else:
        env = make_vec_env(env_id, n_envs=n_envs, seed=seed, vec_env_cls=vec_env_cls, wrapper_class=wrapper)
        policy = "MlpPolicy"
    if normalize and policy == "MlpPolicy":  # frames are not normalised (as the zoo's Atari settings)
        env = VecNormalize(env)
    if learning_starts is not None and "learning_starts" in params:
        params["learning_starts"] = learning_starts
    if "noise_std" in params:
        actions = env.action_space.shape[-1]
        params["action_noise"] = NormalActionNoise(np.zeros(actions), params.pop("noise_std") * np.ones(actions))
    if "net_arch" in params:
        params["policy_kwargs"] = {"net_arch": params.pop("net_arch")}
    if policy == "CnnPolicy" and "buffer_size" not in params and algorithm in ("sac", "td3", "ddpg"):
        params["buffer_size"] = 100_000  # images: the default million frames would not fit a laptop
    if framework == "sbx" and "learning_rate" in params and algorithm in ("sac", "td3", "ddpg"):
        params["qf_learning_rate"] = params["learning_rate"]  # SB3 uses one rate for actor and critic
    cls = algorithm_class(framework, algorithm, device)
    return cls(policy, env, device=device, seed=seed, verbose=0, **params)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("algorithm", choices=ALGORITHMS)
    parser.add_argument("env_id")
    parser.add_argument("timesteps", type=int)
    parser.add_argument("device")
    parser.add_argument("--learning-starts", type=int, default=None)
    parser.add_argument("--n-envs", type=int, default=1)
    parser.add_argument("--subproc", action="store_true", help="step the environments in SubprocVecEnv workers")
    parser.add_argument("--framework", choices=FRAMEWORKS, default="sb3")
    parser.add_argument("--hyperparameters", choices=("zoo", "cartpole"), default="zoo",
                        help="rl-zoo3's MuJoCo settings, or (PPO only) those of the jitted PPO on CartPole")
    args = parser.parse_args(argv)
    problem = framework_problem(args.framework, args.algorithm)
    if problem:
        parser.error(problem)
    if args.hyperparameters == "cartpole" and args.algorithm != "ppo":
        parser.error("--hyperparameters cartpole is PPO's (the jitted PPO's settings)")
    import gymnasium as gym

    from rlscope.integrations.sb3 import Annotate

    try:
        algorithm_class(args.framework, args.algorithm, args.device)
    except ImportError as err:
        fix = FRAMEWORK_INSTALL.get(args.framework, "pip install 'rlscope[rl]'")
        print(f"the {args.framework} framework is not installed ({err}); {fix}", file=sys.stderr)
        return SKIPPED_EXIT
    try:
        model = make_model(args.algorithm, args.env_id, args.device, args.learning_starts, args.n_envs,
                           args.subproc, framework=args.framework, hyperparameters=args.hyperparameters)
    except (ImportError, gym.error.DependencyNotInstalled) as err:
        fix = next(v for k, v in INSTALL.items() if args.env_id.startswith(k))
        print(f"{args.env_id} needs a simulator that is not installed ({err}); {fix}", file=sys.stderr)
        return SKIPPED_EXIT
    if args.algorithm in COMPILABLE:  # the algorithms prepare() knows how to warm up and put back
        prepare(model, args.framework, args.n_envs)
    start = time.perf_counter()
    model.learn(args.timesteps, callback=Annotate())
    learn_s = time.perf_counter() - start
    model.get_env().close()
    print(f"{LEARN_PREFIX}{learn_s:.6f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
