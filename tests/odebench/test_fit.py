"""Every experiment run trains through `fit`: killed anywhere, it resumes bit for bit."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from subprocess_env import odebench_env

#: What legitimately differs between two runs of the same experiment.
VOLATILE = ("date", "command", "provenance")


def _stable(value: object) -> object:
    """``value`` without its times, date, command and provenance (recursively)."""
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if k not in VOLATILE and "seconds" not in k}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


def _run(out: Path, *more: str) -> list[str]:
    return [
        sys.executable, "-m", "odebench", "run", "anode-resnet", "--quick", "--device", "cpu",
        "--no-progress", "--out", str(out), *more,
    ]  # fmt: skip


@pytest.mark.slow
def test_an_experiment_killed_mid_training_resumes_to_the_same_results(tmp_path):
    whole = tmp_path / "whole"
    done = subprocess.run(
        _run(whole), capture_output=True, text=True, env=odebench_env(), timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]

    out = tmp_path / "killed"
    first = out / "1d" / "node" / "seed0" / "checkpoint.pt"  # after the first run's epoch 1
    proc = subprocess.Popen(_run(out), stderr=subprocess.PIPE, text=True, env=odebench_env())
    deadline = time.monotonic() + 300
    while not first.exists():
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        assert time.monotonic() < deadline, f"{first} did not appear"
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not (out / "results.json").exists()

    again = subprocess.run(
        _run(out, "--resume"), capture_output=True, text=True, env=odebench_env(), timeout=600
    )
    assert again.returncode == 0, again.stderr[-2000:]
    assert "resuming" in again.stderr
    resumed = json.loads((out / "results.json").read_text())
    uninterrupted = json.loads((whole / "results.json").read_text())
    assert _stable(resumed) == _stable(uninterrupted)
    assert resumed["details"] == uninterrupted["details"]  # the loss curves, bit for bit


def test_a_task_with_refinement_epochs_and_no_refine_is_refused():
    """Before, such a task trained without ever refining (and a resume failed by an
    assertion): the refinements it declares must have a function that makes them."""
    import torch
    from odebench.training import Task
    from torch import nn

    x = torch.zeros(4, 1)
    with pytest.raises(ValueError, match="`refine_epochs` needs `refine`"):
        Task(
            model=lambda: nn.Linear(1, 1), data=(x, x),
            loss=lambda net, batch: nn.functional.mse_loss(net(batch[0]), batch[1]),
            optimizer=torch.optim.SGD, epochs=2, batch_size=4, refine_epochs=(1,),
        )  # fmt: skip


def _line(y, epochs):
    """A linear map fitted to ``y`` on 64 points of [-1, 1], its settings its rate."""
    import functools

    import torch
    from odebench.training import Task
    from torch import nn

    return Task(
        model=lambda: nn.Linear(1, 1), data=(torch.linspace(-1, 1, 64)[:, None], y),
        loss=lambda net, batch: nn.functional.mse_loss(net(batch[0]), batch[1]),
        optimizer=functools.partial(torch.optim.SGD, lr=0.1), epochs=epochs,
        batch_size=16, settings={"lr": 0.1},
    )  # fmt: skip


QUIET = {"log": lambda line: None, "progress": False}


def test_a_resumed_task_must_train_on_the_same_data(tmp_path):
    """Before, a task resumed on other data (an experiment's data set found elsewhere)
    went on training on it without a word."""
    import torch
    from odebench.training import fit

    x = torch.linspace(-1, 1, 64)[:, None]
    fit(_line(3 * x, 1), tmp_path, **QUIET)
    with pytest.raises(ValueError, match=r"settings that differ .*data_sha256"):
        fit(_line(2 * x, 2), tmp_path, resume=True, **QUIET)
    assert torch.load(tmp_path / "checkpoint.pt", weights_only=True)["epoch"] == 1
    assert len(fit(_line(3 * x, 2), tmp_path, resume=True, **QUIET).rows) == 2


def test_a_resume_with_nothing_left_to_train_writes_its_rows(tmp_path):
    """A stop between the last checkpoint and its rows left metrics.json a row short, and
    a resume with nothing left to train kept it so."""
    import torch
    from odebench.training import fit

    y = 3 * torch.linspace(-1, 1, 64)[:, None]
    rows = fit(_line(y, 2), tmp_path, **QUIET).rows
    metrics = tmp_path / "metrics.json"
    metrics.write_text(json.dumps(rows[:1]))
    assert fit(_line(y, 2), tmp_path, resume=True, **QUIET).rows == rows
    assert json.loads(metrics.read_text()) == rows


def test_a_model_that_draws_from_torchs_generator_trains_the_same_from_the_same_seed(tmp_path):
    """Dropout draws from torch's global generator, which the run did not seed: the same
    task fitted twice in one process trained two sets of weights."""
    import functools

    import torch
    from odebench.training import Task, fit
    from torch import nn

    x = torch.linspace(-1, 1, 64)[:, None]
    task = Task(
        model=lambda: nn.Sequential(nn.Linear(1, 16), nn.Dropout(0.5), nn.Linear(16, 1)),
        data=(x, 3 * x), loss=lambda net, batch: nn.functional.mse_loss(net(batch[0]), batch[1]),
        optimizer=functools.partial(torch.optim.SGD, lr=0.1), epochs=2, batch_size=16,
    )  # fmt: skip
    first = fit(task, tmp_path / "first", **QUIET).model.state_dict()
    torch.manual_seed(1)  # whatever ran before
    second = fit(task, tmp_path / "second", **QUIET).model.state_dict()
    assert all(torch.equal(first[k], second[k]) for k in first)


def test_a_resume_refuses_more_epochs_where_the_schedule_depends_on_them(tmp_path):
    """A cosine schedule over the epochs (the pendulum's, the adjoint ContinuousNet's):
    resumed with more epochs, the run took its length from the checkpoint and went on
    past its end, the rate rising back to its start, unlike a run of that length."""
    import functools

    import torch
    from odebench.training import Task, fit
    from torch import nn

    def task(epochs: int, cosine: bool) -> Task:
        x, schedules = torch.linspace(-1, 1, 64)[:, None], torch.optim.lr_scheduler
        schedule = functools.partial(schedules.CosineAnnealingLR, T_max=4 * epochs)
        if not cosine:
            schedule = functools.partial(schedules.StepLR, step_size=4)
        return Task(
            model=lambda: nn.Linear(1, 1), data=(x, 3 * x),
            loss=lambda net, batch: nn.functional.mse_loss(net(batch[0]), batch[1]),
            optimizer=functools.partial(torch.optim.SGD, lr=0.1), epochs=epochs, batch_size=16,
            schedule=schedule, settings={"epochs": epochs},
        )  # fmt: skip

    fit(task(2, cosine=True), tmp_path / "cosine", **QUIET)
    with pytest.raises(ValueError, match=r"settings that differ .*schedule .*'T_max': 8"):
        fit(task(4, cosine=True), tmp_path / "cosine", resume=True, **QUIET)
    fit(task(2, cosine=False), tmp_path / "step", **QUIET)
    whole = fit(task(4, cosine=False), tmp_path / "whole", **QUIET).rows
    resumed = fit(task(4, cosine=False), tmp_path / "step", resume=True, **QUIET).rows
    assert _stable(resumed) == _stable(whole)


@pytest.mark.parametrize(
    ("change", "key"),
    [({"batch_size": 8}, "batch_size"), ({"seed": 3}, "seed"), ({"drop_last": False}, "drop_last")],
)
def test_a_resumed_task_must_cut_and_seed_its_batches_as_the_run_did(tmp_path, change, key):
    """A task resumed with another batch size, seed or last batch went on training
    without a word, unless its own settings happened to name them."""
    import dataclasses

    import torch
    from odebench.training import fit

    y = 3 * torch.linspace(-1, 1, 64)[:, None]
    fit(_line(y, 1), tmp_path, **QUIET)
    with pytest.raises(ValueError, match=rf"settings that differ .*task .*'{key}'"):
        fit(dataclasses.replace(_line(y, 2), **change), tmp_path, resume=True, **QUIET)
    assert len(fit(_line(y, 2), tmp_path, resume=True, **QUIET).rows) == 2


@pytest.mark.parametrize(
    ("kind", "options"),
    [
        ("SGD", {"lr": 0.5}),  # the checkpoint's rate, 0.1, went on without a word
        ("SGD", {"lr": 0.1, "momentum": 0.9}),
        ("Adam", {"lr": 0.1}),  # loaded SGD's options, then failed in its first step
    ],
)
def test_a_resumed_task_must_keep_its_optimiser(tmp_path, kind, options):
    """Loading the optimiser's state puts back its saved rate and options: a task resumed
    with another optimiser, its settings unchanged, trained with the old one's."""
    import dataclasses
    import functools

    import torch
    from odebench.training import fit

    y = 3 * torch.linspace(-1, 1, 64)[:, None]
    fit(_line(y, 1), tmp_path, **QUIET)
    changed = functools.partial(getattr(torch.optim, kind), **options)
    with pytest.raises(ValueError, match=r"settings that differ .*optimizer \['SGD'"):
        fit(dataclasses.replace(_line(y, 2), optimizer=changed), tmp_path, resume=True, **QUIET)
    resumed = fit(_line(y, 2), tmp_path, resume=True, **QUIET)
    assert resumed.optimizer.param_groups[0]["lr"] == 0.1 and len(resumed.rows) == 2


def test_a_checkpoint_inside_an_epoch_is_not_resumed_on_several_processes(tmp_path, monkeypatch):
    """Only a single process saves inside an epoch (on a signal), with its totals of the
    epoch so far; resumed under torchrun, every process added them to its own, and the
    epoch's train loss counted its first batches twice (0.2115 for 0.2209 on two)."""
    import dataclasses

    import torch
    from odebench.training import Interrupted, Training, _fit, fit

    y = 3 * torch.linspace(-1, 1, 64)[:, None]
    task, batches = _line(y, 2), iter(range(1, 100))

    def loss(net, batch):
        if next(batches) == 6:  # epoch 2, batch 2 (of 4 per epoch)
            signal.raise_signal(signal.SIGTERM)
        return task.loss(net, batch)

    with pytest.raises(Interrupted, match="stopped at epoch 2, batch 2"):
        fit(dataclasses.replace(task, loss=loss), tmp_path, **QUIET)
    monkeypatch.setattr(_fit, "_process", lambda: _fit._Process(0, 2, 0))
    two = Training(task, tmp_path, device=torch.device("cpu"), log=lambda line: None)
    with pytest.raises(ValueError, match="stopped inside epoch 2, on one process"):
        two.resume()
    monkeypatch.undo()
    assert len(fit(task, tmp_path, resume=True, **QUIET).rows) == 2


LAST_BATCH = """
import functools, sys, torch
from torch import nn
from odebench.training import Task, fit

x = torch.linspace(-1, 1, 37)[:, None]  # batches of 16, 16 and 5
task = Task(model=lambda: nn.Linear(1, 1), data=(x, 3 * x),
            loss=lambda net, batch: nn.functional.mse_loss(net(batch[0]), batch[1]),
            optimizer=functools.partial(torch.optim.SGD, lr=0.1), epochs=1, batch_size=16,
            drop_last=False)
fit(task, sys.argv[1], log=lambda line: None, progress=False, device="cpu")
"""


@pytest.mark.slow
def test_a_last_batch_that_does_not_split_over_the_processes_is_refused(tmp_path):
    """Kept (drop_last=False), a last batch of 5 examples over 2 processes trained 2 and 2:
    the fifth was left out of every epoch without a word."""
    import subprocess
    import sys

    from subprocess_env import odebench_env

    script = tmp_path / "last_batch.py"
    script.write_text(LAST_BATCH)
    two = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--standalone",
         str(script), str(tmp_path / "run")],
        capture_output=True, text=True, env=odebench_env(), timeout=180,
    )  # fmt: skip
    assert two.returncode != 0
    assert "The last batch of epoch 1, 5 examples, does not split evenly over 2" in two.stderr
