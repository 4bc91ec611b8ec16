"""The MLP policy whose inference sits in the data-collection loop (as in the paper's Fig. 1b)."""

from __future__ import annotations

from typing import Any

__all__ = ["make_policy"]


def make_policy(hidden: int = 64, device: str = "cpu", seed: int = 0) -> Any:
    """A 4 -> hidden -> hidden -> 2 tanh MLP, SB3's default actor size for CartPole."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(4, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(), nn.Linear(hidden, 2)
    ).to(device).eval()
