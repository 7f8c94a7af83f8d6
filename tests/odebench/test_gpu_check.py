"""``examples/gpu_check.py``: its smoke run passes every check, and its exit statuses.

The smoke run is what ``nox -s examples`` runs; here it runs on the CPU (and on the GPU
when there is one), so that the script cannot rot between the runs on a GPU machine.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import odebench
import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "gpu_check.py"
MODEL_CHECKS = (
    "mlp", "resnet", "rknet", "odenet-backprop", "odenet-adjoint", "odenet-checkpoint",
    "anode", "sonode", "continuousnet", "toy-anode",
)  # fmt: skip
CHECKS = (*MODEL_CHECKS, "trainer", "ddp")
ODE_CHECKS = ("odenet-backprop", "odenet-adjoint", "odenet-checkpoint", "anode", "sonode")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    """``python examples/gpu_check.py ARGS`` with the odebench under test, one thread."""
    env = dict(os.environ)
    src = str(Path(odebench.__file__).resolve().parents[1])
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    env["OMP_NUM_THREADS"] = "1"
    cmd = [sys.executable, str(SCRIPT), *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)


@functools.cache
def _script() -> ModuleType:
    """The script imported as a module, for its functions (once: its dataclasses look
    their module up in ``sys.modules``)."""
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(
    scope="module",
    params=[
        "cpu",
        pytest.param(
            "cuda",
            marks=[
                pytest.mark.gpu,
                pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
            ],
        ),
    ],
)
def smoke(request, tmp_path_factory):
    """The smoke run on each device, once for the module: the process and the JSON."""
    path = tmp_path_factory.mktemp("gpu_check") / "out" / "gpu_check.json"
    proc = _run("--smoke", "--device", request.param, "--threads", "1", "--out", str(path))
    return proc, json.loads(path.read_text(encoding="utf-8"))


@pytest.mark.slow
def test_the_smoke_run_passes_every_check(smoke):
    proc, document = smoke
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    checks = {c["name"]: c for c in document["checks"]}
    assert tuple(checks) == CHECKS
    for name, check in checks.items():
        if name == "ddp" and check["ok"] is None:  # fewer than two GPUs
            assert check["skipped"], check
            continue
        assert check["ok"] is True, check
        assert check["error"] is None and check["skipped"] is None
        assert check["seconds_per_step"] > 0 and math.isfinite(check["images_per_second"])
        assert (check["peak_mib"] is not None) == (document["environment"]["device"] != "cpu")
        assert f"\n{name} " in proc.stdout  # a row of the table
    assert document["smoke"] is True


@pytest.mark.slow
def test_the_gradient_methods_differ_in_their_backward_evaluations(smoke):
    _, document = smoke
    details = {c["name"]: c["detail"] for c in document["checks"]}
    backward = {}
    for name in ODE_CHECKS:
        forward, plus, back = details[name].removeprefix("NFE ").split()
        assert plus == "+" and int(forward) > 0, details[name]
        backward[name] = int(back)
    assert backward["odenet-backprop"] == 0  # backprop evaluates nothing again
    assert backward["odenet-adjoint"] > 0
    assert backward["odenet-checkpoint"] > 0
    assert details["mlp"] == ""  # no ODE layer, no NFE


@pytest.mark.slow
def test_the_json_records_the_environment(smoke):
    _, document = smoke
    env = document["environment"]
    assert env["torch"] == torch.__version__
    assert env["odebench"] == odebench.__version__
    assert env["device_count"] == torch.cuda.device_count()
    assert env["device_name"]
    assert document["sizes"]["steps"] >= 1 and document["wall_seconds"] > 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="the machine has a CUDA device")
def test_without_cuda_it_stops_with_one_line_and_status_2(tmp_path):
    proc = _run("--out", str(tmp_path / "gpu_check.json"))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "sees no CUDA device" in lines[0] and "--device cpu" in lines[0]
    assert not (tmp_path / "gpu_check.json").exists()


def test_a_failed_check_is_recorded_and_gives_status_1(tmp_path, monkeypatch, capsys):
    script = _script()

    def skipped(*args):
        raise script.CheckSkippedError("not here")

    # image_size 4 is below the models' smallest, 8: building the model fails.
    monkeypatch.setattr(script, "CASES", (script.Case("tiny-mlp", "mlp", (1, 4, 4)),))
    monkeypatch.setattr(script, "trainer_check", lambda device, sizes: script.Timing((0.5,), 8))
    monkeypatch.setattr(script, "ddp_check", skipped)
    assert script.main(["--smoke", "--out", str(tmp_path)]) == 1
    checks = json.loads((tmp_path / "gpu_check.json").read_text(encoding="utf-8"))["checks"]
    tiny, trainer, ddp = checks
    assert tiny["ok"] is False and tiny["error"].startswith("ValueError: ")
    assert tiny["seconds_per_step"] is None
    assert trainer["ok"] is True and trainer["images_per_second"] == 16.0
    assert ddp["ok"] is None and ddp["skipped"] == "not here"
    out = capsys.readouterr()
    assert "FAILED" in out.out and "failed: tiny-mlp" in out.err


def test_run_check_keeps_the_last_line_of_a_long_error():
    script = _script()

    def broken():
        raise RuntimeError("Traceback of a worker\n  ...\nValueError: the real cause")

    result = script.run_check("x", broken, torch.device("cpu"))
    assert result.ok is False
    assert result.error == "RuntimeError: ValueError: the real cause"


def test_out_names_a_json_file_or_a_folder():
    script = _script()
    assert script.json_path(Path("a/b.json")) == Path("a/b.json")
    assert script.json_path(Path("a/b")) == Path("a/b/gpu_check.json")
