"""Solves stay on the state's device: CPU always, CUDA where a device is present."""

from __future__ import annotations

import math

import odecore
import pytest
import torch

DEVICES = [
    pytest.param("cpu"),
    pytest.param(
        "cuda",
        marks=[
            pytest.mark.gpu,
            pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
        ],
    ),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("method", ["rk4", "dopri5", "tsit5", "dopri8"])
@pytest.mark.parametrize("device", DEVICES)
def test_solution_lives_on_the_state_device(device, method, dtype):
    seen = []

    def field(t, y):
        seen.append((t.device.type, t.dtype))
        return -y

    y0 = torch.ones(4, 3, device=device, dtype=dtype)
    t = torch.linspace(0.0, 1.0, 7, device=device, dtype=dtype)
    options = {"n_steps": 20} if method == "rk4" else None
    ys = odecore.odeint(field, y0, t, method=method, options=options)
    assert ys.device.type == device and ys.dtype == dtype
    assert set(seen) == {(device, dtype)}
    tol = 1e-5 if dtype == torch.float32 else 1e-7
    expected = torch.exp(-t)[:, None, None].expand_as(ys)
    torch.testing.assert_close(ys, expected, rtol=tol, atol=tol)


@pytest.mark.parametrize("device", DEVICES)
def test_jump_t_on_device(device):
    jumps = torch.tensor([0.25, 0.5], dtype=torch.float64, device=device)
    levels = torch.tensor([1.0, -2.0, 3.0], dtype=torch.float64, device=device)

    def field(t, y):
        return levels[torch.bucketize(t, jumps, right=True)].expand_as(y)

    t = torch.tensor([0.0, 1.0], dtype=torch.float64, device=device)
    y0 = torch.zeros(2, dtype=torch.float64, device=device)
    ys = odecore.odeint(field, y0, t, method="dopri5", options={"jump_t": jumps})
    assert ys[-1].tolist() == pytest.approx([0.25 - 0.5 + 1.5] * 2, abs=1e-14)
    assert not math.isnan(ys[-1, 0].item())
