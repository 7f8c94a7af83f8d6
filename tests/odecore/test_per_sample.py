"""Rodas4's counts of Jacobians and factorisations."""

from __future__ import annotations

import odecore
import pytest
import torch
from odecore import PIDController, Rodas4

F64 = torch.float64


def _vdp(mu):
    def f(t, y):
        x, v = y[..., :1], y[..., 1:]
        return torch.cat([v, mu * (1 - x * x) * v - x], dim=-1)

    return f


MU = torch.logspace(0, 3, 8, dtype=F64).unsqueeze(1)
VDP_Y0 = torch.stack([torch.linspace(1.0, 2.0, 8), torch.zeros(8)], dim=1).to(F64)


# --- Rodas4's counts -----------------------------------------------------------------------


@pytest.mark.parametrize("controller", [PIDController(rtol=1e-6, atol=1e-6)])
def test_rodas4_counts_one_jacobian_and_one_factorisation_per_step(controller):
    sol = odecore.solve(
        _vdp(MU[:3]), VDP_Y0[:3], t0=0.0, t1=5.0, solver=Rodas4(independent=True),
        controller=controller,
    )  # fmt: skip
    assert sol.stats.n_steps > 10
    assert sol.stats.n_jacobians == sol.stats.n_factorisations == sol.stats.n_steps
    assert sol.stats.n_newton_iters == 0
