"""Training runs: configuration, files, checkpoints, resuming after a crash, processes."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import odebench
import odecore
import pytest
import torch
from odebench._io import save_checkpoint, write_atomic, write_csv
from odebench.models import build_model, ode_layers
from odebench.training import (
    Interrupted,
    RunExistsError,
    TrainConfig,
    TrainingFailedError,
    evaluate,
    find_data,
    load_model,
    train,
)
from odebench.training._data import epoch_order, shard
from subprocess_env import odebench_env

TOY = {"model": "toy-node", "dataset": "annuli-1d", "optimizer": "adam", "lr": 3e-3}
TIMING = ("images_per_second", "epoch_seconds")


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "odebench", *args]


def _two_processes(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``args`` (a script, or ``-m`` and a module, with its arguments) under torchrun."""
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--standalone",
         *args],
        capture_output=True, text=True, env=odebench_env(), timeout=180,
    )  # fmt: skip


def _untimed(metrics: list[dict]) -> list[dict]:
    return [{k: v for k, v in m.items() if k not in TIMING} for m in metrics]


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"model": "nope"}, r"Unknown `model` 'nope'; known: .*odenet"),
        ({"dataset": "imagenet"}, r"Unknown `dataset` 'imagenet'; known: mnist"),
        ({"epochs": -1}, r"`epochs` must be a non-negative integer, got -1"),
        ({"batch_size": 0}, r"`batch_size` must be a positive integer"),
        ({"lr": float("nan")}, r"`lr` must be a positive number"),
        ({"optimizer": "lbfgs"}, r"`optimizer` must be 'sgd' or 'adam'"),
        ({"milestones": (5, 3)}, r"`milestones` must be increasing"),
        ({"device": "tpu"}, r"`device` must be 'auto', 'cpu', 'cuda'"),
        ({"momentum": 1.0}, r"`momentum` must lie in \[0, 1\)"),
        ({"weight_decay": float("nan")}, r"`weight_decay` must be a finite number >= 0, got nan"),
        ({"seed": 2**63}, r"`seed` must be at most 4294967295"),
        ({"refine_epochs": (3, 2)}, r"`refine_epochs` must be a tuple of increasing positive"),
        ({"refine_epochs": (0,)}, r"`refine_epochs` must be .* got \(0,\)"),
        ({"refine_epochs": (2,)}, r"`refine_epochs` applies to the ContinuousNet models only"),
        ({"n_steps": 2}, r"`n_steps` applies to fixed-step methods, not to the adaptive 'dopri5'"),
        ({"method": "rk4"}, r"The fixed-step `method` 'rk4' needs `n_steps`"),
        ({"method": "dopri"}, r"Unknown `method` 'dopri'; known methods: "),
        ({"rtol": 0.0}, r"`rtol` must be a positive number"),
        ({"atol": float("inf")}, r"`atol` must be a positive number"),
        ({"gradient": "adjiont"}, r"Unknown `gradient` 'adjiont'; known: backprop, adjoint"),
        ({"model": "mlp", "method": "rk4"}, r"`method` does not apply to `model` 'mlp'"),
        ({"model": "rknet", "n_steps": 3}, r"`n_steps` does not apply to `model` 'rknet'"),
        # Settings that would change nothing are refused, not recorded as used.
        ({"model": "rknet", "gradient": "adjoint"}, r"`gradient` does not apply to `model` 'rkn"),
        ({"model": "resnet", "rtol": 1e-6}, r"`rtol` does not apply to `model` 'resnet'"),
        ({"model": "mlp", "atol": 1e-6}, r"`atol` does not apply to `model` 'mlp'"),
        (
            {"method": "rk4", "n_steps": 4, "rtol": 1e-6},
            r"`rtol` applies to adaptive methods, not to the fixed-step 'rk4'",
        ),
        (
            {"model": "continuousnet", "atol": 1e-6},
            r"`atol` applies to adaptive methods, not to the fixed-step 'euler'",
        ),
        (
            {"model": "continuousnet", "method": "dopri5"},
            r"`method` 'dopri5' does not apply to `model` 'continuousnet': a ContinuousNet steps",
        ),
        (
            {"model": "continuousnet", "method": "implicit_euler"},
            r"`method` 'implicit_euler' does not apply to `model` 'continuousnet'",
        ),
        ({"method": "implicit_euler"}, r"The fixed-step `method` 'implicit_euler' needs `n_steps`"),
        (
            {"model": "continuousnet", "gradient": "adjoint"},
            r"`gradient` 'adjoint' does not apply to `model` 'continuousnet'",
        ),
        ({"model": "continuousnet", "n_steps": 0}, r"`n_steps` must be a positive integer"),
        ({"model": "continuousnet", "compile": True}, r"`compile` does not apply to `model`"),
        (  # a ContinuousNet steps n_steps times, however many max_num_steps allows
            {"model": "continuousnet", "solver_options": {"max_num_steps": 2}},
            r"`solver_options` does not apply to `model` 'continuousnet'",
        ),
        ({"augment": True}, r"`augment` crops images, not the toy set 'annuli-1d'; leave it"),
        # A toy model's points are not images, nor the other way round.
        ({"model": "resnet"}, r"`model` 'resnet' takes images, not those of `dataset` 'annuli-1d'"),
        ({"dataset": "mnist"}, r"'toy-node' takes points, .*; its data sets: annuli-1d, annuli-2d"),
        # Adam has no momentum, and gamma acts only at a milestone.
        ({"optimizer": "adam", "momentum": 0.5}, r"`momentum` changes nothing: `optimizer` is 'a"),
        ({"gamma": 0.5}, r"`gamma` changes nothing: no `milestones`; leave"),
    ],
)
def test_bad_configuration(changes, match):
    with pytest.raises(ValueError, match=match):
        TrainConfig(**{**TOY, **changes})


@pytest.mark.parametrize(
    ("method", "solver"),
    [("implicit_euler", odecore.ImplicitEuler), ("radauIIA5", odecore.RadauIIA5)],
)
def test_an_implicit_fixed_step_method_takes_n_steps(method, solver):
    # It is fixed-step because its solver says so, not because a list of names has it.
    config = TrainConfig(**{**TOY, "method": method, "n_steps": 4})
    assert isinstance(config.spec.solver, solver) and config.spec.n_steps == 4


def test_the_solver_flags_resolve_once_into_the_spec_the_layers_get():
    config = TrainConfig(
        **{**TOY, "method": "tsit5", "rtol": 1e-4, "atol": 1e-6, "gradient": "adjoint"}
    )
    assert config.spec == odecore.OdeSpec.from_method(
        "tsit5", rtol=1e-4, atol=1e-6, gradient="adjoint"
    )
    model = build_model(config.model, in_channels=1, num_classes=1, image_size=0, spec=config.spec)
    assert [layer.spec for layer in ode_layers(model)] == [config.spec]
    fixed = TrainConfig(**{**TOY, "method": "rk4", "n_steps": 5})
    assert fixed.spec == odecore.OdeSpec(solver=odecore.RK4(), n_steps=5)
    contnet = TrainConfig(model="continuousnet", dataset="mnist")
    assert contnet.spec == odecore.OdeSpec(solver=odecore.Euler(), n_steps=8)
    assert TrainConfig(model="resnet", dataset="mnist").spec is None


def test_schedule_and_round_trip():
    config = TrainConfig(model="odenet", dataset="mnist", lr=0.1, milestones=(2, 4), gamma=0.5)
    assert [config.lr_at(e) for e in range(6)] == [0.1, 0.1, 0.05, 0.05, 0.025, 0.025]
    assert config.loss == "cross_entropy"
    assert TrainConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    refined = TrainConfig(
        model="continuousnet", dataset="cifar10", method="rk4", n_steps=1, refine_epochs=[2, 5]
    )
    assert refined.refine_epochs == (2, 5) and refined.final_steps == 4
    assert [refined.refinements_before(e) for e in range(7)] == [0, 0, 0, 1, 1, 1, 2]
    assert refined.refinements_before(2, batch=3) == 1  # inside epoch 2: refined already
    assert TrainConfig.from_dict(json.loads(json.dumps(refined.to_dict()))) == refined
    assert config.final_steps is None


def test_epoch_order_and_shards_cover_each_example_once():
    order = epoch_order(103, seed=3, epoch=2)
    assert torch.equal(order, epoch_order(103, seed=3, epoch=2))
    assert not torch.equal(order, epoch_order(103, seed=3, epoch=3))
    batches = order[:100].split(10)  # as fit cuts it: the last three examples dropped
    shards = [shard(b, r, 2) for b in batches for r in range(2)]
    assert torch.equal(torch.cat(shards), order[:100])


def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path):
    path = tmp_path / "metrics.csv"
    write_csv(path, [{"epoch": 1, "acc": 0.5}, {"epoch": 2, "acc": None, "nfe": 20}])
    assert path.read_text().splitlines() == ["epoch,acc,nfe", "1,0.5,", "2,,20"]

    def fail(f):
        f.write(b"half a fi")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_atomic(path, fail)
    assert path.read_text().startswith("epoch,acc,nfe")
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.csv"]  # no temporary left
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask  # as open() would have made it


def test_find_data_names_the_places_searched(tmp_path):
    with pytest.raises(FileNotFoundError, match=rf"no mnist data in {tmp_path} .*--data-dir"):
        find_data("mnist", tmp_path)


@pytest.mark.parametrize("name", ["spirals", "imagenet"])
def test_find_data_refuses_what_is_not_an_image_set(name, tmp_path):
    with pytest.raises(ValueError, match=rf"`dataset` must be an image data set .* got '{name}'"):
        find_data(name, tmp_path)


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "toy"
    config = TrainConfig(**TOY, epochs=2, batch_size=100, train_size=600, progress=False)
    lines: list[str] = []
    results = train(config, out, log=lines.append)
    return config, out, results, lines


def test_a_run_writes_its_files(toy_run):
    config, out, results, lines = toy_run
    names = {p.name for p in out.iterdir()}
    expected = {"config.json", "metrics.json", "metrics.csv", "curves.png", "checkpoint.pt"}
    assert expected | {"results.json"} == names
    metrics = json.loads((out / "metrics.json").read_text())
    assert [m["epoch"] for m in metrics] == [1, 2]
    assert all(m["nfe_forward"] > 0 and m["test_nfe"] > 0 for m in metrics)
    assert all(m["nfe_backward"] is None for m in metrics)  # backprop: no backward solve
    assert all(m["train_acc"] is None for m in metrics)  # regression: no accuracy
    assert (out / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert results["final"] == metrics[-1]
    assert json.loads((out / "results.json").read_text()) == results
    assert len(lines) == 3 and lines[1].startswith("epoch 1/2  train loss")
    assert lines[0].startswith(f"toy-node on annuli-1d: {results['parameters']:,} parameters")
    assert "600 training and 1000 test examples, cpu" in lines[0]
    saved = json.loads((out / "config.json").read_text())
    assert TrainConfig.from_dict(saved["config"]) == config
    assert saved["parameters"] == results["parameters"]


def test_checkpoint_loads_with_weights_only_and_restores_the_model(toy_run):
    config, out, results, _ = toy_run
    state = torch.load(out / "checkpoint.pt", weights_only=True)
    assert (state["epoch"], state["batch"]) == (2, 0)
    model, loaded = load_model(out)
    assert loaded == config
    from odebench.data import annuli

    test = annuli(1000, dim=1, generator=torch.Generator().manual_seed(1))
    again = evaluate(model, test, "mse", batch_size=1000, device=torch.device("cpu"))
    assert math.isclose(again["loss"], results["final"]["test_loss"], rel_tol=1e-6)


@pytest.fixture(scope="module")
def one_epoch(tmp_path_factory):
    """Train the toy NODE for one epoch with extra options; return the weights and metrics.

    Each set of options trains once per module: the float32 baseline is shared.
    """
    runs: dict[tuple, tuple[dict[str, torch.Tensor], dict]] = {}

    def run(**options: object) -> tuple[dict[str, torch.Tensor], dict]:
        key = tuple(sorted(options.items()))
        if key not in runs:
            out = tmp_path_factory.mktemp("one-epoch") / "run"
            config = TrainConfig(
                **TOY, epochs=1, batch_size=100, train_size=600, progress=False, **options
            )
            results = train(config, out, log=lambda line: None)
            model, _ = load_model(out)
            runs[key] = model.state_dict(), results["final"]
        return runs[key]

    return run


@pytest.mark.skipif(shutil.which("c++") is None, reason="torch.compile needs a C++ compiler")
def test_compile_trains_the_weights_eager_mode_trains(one_epoch, monkeypatch):
    from odecore import _compiled

    # The same graphs as inductor's (odecore's inductor tests run its C++), in seconds.
    monkeypatch.setattr(_compiled, "_BACKEND", "aot_eager")
    eager_weights, eager = one_epoch()
    weights, compiled = one_epoch(compile=True)
    assert weights.keys() == eager_weights.keys()  # checkpoints carry no compile prefix
    for name, value in weights.items():
        torch.testing.assert_close(value, eager_weights[name], rtol=1e-4, atol=1e-5, msg=name)
    assert compiled["nfe_forward"] == eager["nfe_forward"]
    assert math.isclose(compiled["test_loss"], eager["test_loss"], rel_tol=1e-4)


def test_compile_solves_a_fixed_step_layer_whole_and_compiles_the_field_of_an_adaptive_one():
    from odebench.training._loop import _compile_in_place

    def toy(spec: odecore.OdeSpec) -> torch.nn.Module:
        return build_model("toy-node", in_channels=1, num_classes=1, image_size=0, spec=spec)

    fixed = toy(odecore.OdeSpec.from_method("rk4", options={"n_steps": 4}))
    adaptive = toy(odecore.OdeSpec.from_method("kvaerno5"))  # implicit: its solves do not compile
    for model in (fixed, adaptive):
        _compile_in_place(model)
    (fixed_layer,), (adaptive_layer,) = ode_layers(fixed), ode_layers(adaptive)
    assert fixed_layer.spec.compile and fixed_layer.vector_field._compiled_call_impl is None
    assert not adaptive_layer.spec.compile
    assert adaptive_layer.vector_field._compiled_call_impl is not None


def test_compile_of_a_fixed_step_solve_trains_the_weights_eager_mode_trains(
    tmp_path, monkeypatch: pytest.MonkeyPatch
):
    from odecore import _compiled

    monkeypatch.setattr(_compiled, "_BACKEND", "aot_eager")  # inductor's C++ takes minutes
    weights = []
    for compile in (False, True):
        config = TrainConfig(
            **TOY, method="rk4", n_steps=4, epochs=1, batch_size=100, train_size=300,
            progress=False, compile=compile,
        )  # fmt: skip
        with warnings.catch_warnings():
            warnings.simplefilter("error", odecore.CompileFallbackWarning)
            train(config, tmp_path / f"compile-{compile}", log=lambda line: None)
        weights.append(load_model(tmp_path / f"compile-{compile}")[0].state_dict())
    for name, value in weights[1].items():
        torch.testing.assert_close(value, weights[0][name], rtol=1e-4, atol=1e-5, msg=name)


def test_bf16_autocast_trains_close_to_float32(one_epoch):
    full_weights, full = one_epoch()
    weights, bf16 = one_epoch(bf16=True)
    # The field's layers ran in bfloat16 (about three digits), so the weights moved ...
    changes = [not torch.equal(weights[k], full_weights[k]) for k in weights]
    assert any(changes)
    # ... but the run trains the same model: its losses stay within a few per cent.
    assert math.isfinite(bf16["test_loss"])
    assert math.isclose(bf16["test_loss"], full["test_loss"], rel_tol=0.05)
    assert math.isclose(bf16["train_loss"], full["train_loss"], rel_tol=0.05)


def test_an_existing_run_is_not_overwritten(toy_run):
    config, out, _, _ = toy_run
    with pytest.raises(RunExistsError, match="--resume"):
        train(config, out, log=lambda line: None)


def test_resuming_a_finished_run_with_more_epochs_continues_it(tmp_path, toy_run):
    config, out, _, _ = toy_run
    # An uninterrupted three-epoch run ...
    three = TrainConfig(**{**config.to_dict(), "epochs": 3})
    full = train(three, tmp_path / "full", log=lambda line: None)
    # ... equals the two-epoch run continued for one more epoch.
    copy = tmp_path / "continued"
    copy.mkdir()
    for name in ("checkpoint.pt", "config.json"):
        (copy / name).write_bytes((out / name).read_bytes())
    continued = train(three, copy, resume=True, log=lambda line: None)
    metrics = json.loads((copy / "metrics.json").read_text())
    assert len(metrics) == 3
    assert _untimed([continued["final"]]) == _untimed([full["final"]])


def test_a_resume_with_nothing_left_to_train_writes_every_file_of_the_rows(tmp_path, toy_run):
    """Stopped between the last checkpoint and its rows, a run resumed wrote metrics.json
    whole, but left metrics.csv and curves.png an epoch short."""
    config, out, _, _ = toy_run
    copy = tmp_path / "stopped"
    copy.mkdir()
    for name in ("checkpoint.pt", "config.json"):
        (copy / name).write_bytes((out / name).read_bytes())
    train(config, copy, resume=True, log=lambda line: None)
    assert (copy / "metrics.csv").read_text().count("\n") == 1 + config.epochs
    assert (copy / "curves.png").exists()


def test_a_run_stopped_inside_an_epoch_on_a_gpu_is_not_resumed_on_the_cpu(tmp_path, toy_run):
    """The augmentation generator's state of a CUDA device went into the CPU's, failing
    with a traceback after the run folder was taken."""
    config, out, _, _ = toy_run
    copy = tmp_path / "stopped"
    copy.mkdir()
    (copy / "config.json").write_bytes((out / "config.json").read_bytes())
    state = torch.load(out / "checkpoint.pt", weights_only=True)
    partial = {"loss": torch.zeros((), dtype=torch.float64), "sums": {}, "losses": torch.zeros(1),
               "count": 100, "nfe_forward": 0, "nfe_backward": 0, "seconds": 0.0}  # fmt: skip
    state |= {"epoch": 1, "batch": 1, "partial": partial, "aug_rng": torch.zeros(16).byte()}
    torch.save(state, copy / "checkpoint.pt")
    with pytest.raises(ValueError, match=r"inside epoch 2 on another kind of device than cpu"):
        train(config, copy, resume=True, log=lambda line: None)


def test_a_resume_refuses_other_data_files_and_takes_the_same_ones_elsewhere(tmp_path, digits):
    # --data-dir may change on resume (the files moved), but not what it holds.
    same, other = tmp_path / "same", tmp_path / "other"
    shutil.copytree(digits, same)
    shutil.copytree(digits, other)
    labels = bytearray((other / "train-labels-idx1-ubyte").read_bytes())
    labels[8] = (labels[8] + 1) % 10  # one training label of another value
    (other / "train-labels-idx1-ubyte").write_bytes(labels)
    config = TrainConfig(
        model="mlp", dataset="mnist", data_dir=str(digits), train_size=64, test_size=32,
        batch_size=32, momentum=0.0, device="cpu", progress=False,
    )  # fmt: skip
    out = tmp_path / "run"
    train(config, out, log=lambda line: None)
    moved = TrainConfig(**{**config.to_dict(), "epochs": 2, "data_dir": str(other)})
    with pytest.raises(ValueError, match=r"--resume with settings that differ .*data_sha256"):
        train(moved, out, resume=True, log=lambda line: None)
    assert len(json.loads((out / "metrics.json").read_text())) == 1  # left as it was
    moved = TrainConfig(**{**moved.to_dict(), "data_dir": str(same)})
    results = train(moved, out, resume=True, log=lambda line: None)
    assert results["epochs"] == 2
    assert {Path(f["path"]).parent for f in results["data_files"]} == {same.resolve()}


def _train_cmd(out: Path, epochs: int) -> list[str]:
    return _cli(
        "train", "--model", "toy-node", "--dataset", "annuli-1d", "--optimizer", "adam",
        "--lr", "3e-3", "--batch-size", "32", "--epochs", str(epochs), "--device", "cpu",
        "--no-progress", "--out", str(out),
    )  # fmt: skip


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.01)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    out = tmp_path_factory.mktemp("ref") / "run"
    proc = subprocess.run(_train_cmd(out, 3), capture_output=True, text=True, env=odebench_env())
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads((out / "results.json").read_text())


@pytest.mark.slow
def test_a_run_killed_mid_epoch_resumes_to_the_same_result(tmp_path, uninterrupted):
    out = tmp_path / "run"
    proc = subprocess.Popen(
        _train_cmd(out, 3), stderr=subprocess.PIPE, text=True, env=odebench_env()
    )
    _wait_for(out / "metrics.json", proc)  # epoch 1 done: the process is inside epoch 2
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not (out / "results.json").exists()
    resumed = subprocess.run(
        [*_train_cmd(out, 3), "--resume"], capture_output=True, text=True, env=odebench_env()
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming" in resumed.stderr
    result = json.loads((out / "results.json").read_text())
    assert _untimed([result["final"]]) == _untimed([uninterrupted["final"]])


@pytest.mark.slow
def test_sigterm_saves_a_mid_epoch_checkpoint_that_resumes_exactly(tmp_path, uninterrupted):
    out = tmp_path / "run"
    proc = subprocess.Popen(
        _train_cmd(out, 3), stderr=subprocess.PIPE, text=True, env=odebench_env()
    )
    _wait_for(out / "curves.png", proc)  # the last file of epoch 1
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    state = torch.load(out / "checkpoint.pt", weights_only=True)
    assert state["batch"] > 0 or state["epoch"] > 1, "stopped at an epoch boundary"
    assert "checkpoint saved" in err
    resumed = subprocess.run(
        [*_train_cmd(out, 3), "--resume"], capture_output=True, text=True, env=odebench_env()
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    result = json.loads((out / "results.json").read_text())
    assert _untimed([result["final"]]) == _untimed([uninterrupted["final"]])


THREADS_OF_A_RUN = """
import json, os, sys
from pathlib import Path
from odebench.training import TrainConfig, train

def threads():
    return [(Path("/proc/self/task") / t / "comm").read_text().strip()
            for t in os.listdir("/proc/self/task")]

out = Path(sys.argv[2])
config = TrainConfig(model="mlp", dataset="mnist", data_dir=sys.argv[1], lr=0.05,
                     batch_size=64, epochs=1, device="cpu", progress=False)
during = []
train(config, out / "run", log=lambda line: during.append(threads()))
seen = {"during": during[-1], "after": threads()}
(out / f"threads-{os.environ['RANK']}.json").write_text(json.dumps(seen))
"""


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux's /proc")
def test_two_processes_end_their_process_group_before_they_exit(tmp_path, digits):
    # A group still held after `train` is torn down only by the interpreter's
    # shutdown; a finished worker once aborted at exit in that state.
    script = tmp_path / "threads.py"
    script.write_text(THREADS_OF_A_RUN)
    run = _two_processes(str(script), str(digits), str(tmp_path))
    assert run.returncode == 0, run.stderr[-3000:]
    # gloo's worker threads end with the group. Its socket thread belongs to the
    # transport's device, which one CI run saw outlive the group: not checked.
    for rank in (0, 1):
        seen = json.loads((tmp_path / f"threads-{rank}.json").read_text())
        assert "pt_gloo_runloop" in seen["during"], seen
        assert "pt_gloo_runloop" not in seen["after"], seen


@pytest.mark.slow
def test_two_processes_train_the_same_weights_as_one(tmp_path, digits):
    # Chen's MLP: every sample's computation is independent of its batch mates, so
    # the mean of the two shards' gradients is the whole batch's gradient.
    common = [
        "train", "--model", "mlp", "--dataset", "mnist", "--data-dir", str(digits),
        "--lr", "0.05", "--batch-size", "64", "--epochs", "2", "--device", "cpu",
        "--no-progress",
    ]  # fmt: skip
    one = subprocess.run(
        _cli(*common, "--out", str(tmp_path / "one")),
        capture_output=True,
        text=True,
        env=odebench_env(),
    )
    assert one.returncode == 0, one.stderr[-2000:]
    two = _two_processes("-m", "odebench", *common, "--out", str(tmp_path / "two"))
    assert two.returncode == 0, two.stderr[-3000:]
    a = torch.load(tmp_path / "one" / "checkpoint.pt", weights_only=True)
    b = torch.load(tmp_path / "two" / "checkpoint.pt", weights_only=True)
    assert a["model"].keys() == b["model"].keys()
    for key in a["model"]:
        torch.testing.assert_close(a["model"][key], b["model"][key], rtol=1e-5, atol=1e-6)
    # Training moved the weights, and both runs learned the bright row.
    first = next(iter(a["model"]))
    torch.manual_seed(0)
    from odebench.models import build_model

    fresh = build_model("mlp", in_channels=1, num_classes=10, image_size=28).state_dict()
    assert (a["model"][first] - fresh[first]).abs().max() > 1e-3
    ra = json.loads((tmp_path / "one" / "results.json").read_text())["final"]
    rb = json.loads((tmp_path / "two" / "results.json").read_text())["final"]
    assert ra["test_acc"] == pytest.approx(rb["test_acc"], abs=0.011)
    assert ra["test_acc"] > 0.5
    config = json.loads((tmp_path / "two" / "config.json").read_text())
    assert config["environment"]["processes"] == 2


@pytest.mark.slow
def test_two_processes_count_the_test_nfe_per_batch_as_one(tmp_path):
    # Euler in 4 steps: 4 evaluations per forward pass, whoever runs it. The 501 test
    # points split into 251 and 250, 2 and 1 batches of at most 250.
    common = [
        "train", "--model", "toy-node", "--dataset", "annuli-1d", "--optimizer", "adam",
        "--method", "euler", "--n-steps", "4", "--batch-size", "100", "--train-size", "200",
        "--test-size", "501", "--eval-batch-size", "250", "--device", "cpu", "--no-progress",
    ]  # fmt: skip
    two = _two_processes("-m", "odebench", *common, "--out", str(tmp_path / "two"))
    assert two.returncode == 0, two.stderr[-3000:]
    final = json.loads((tmp_path / "two" / "results.json").read_text())["final"]
    assert (final["nfe_forward"], final["test_nfe"]) == (4, 4)


# Refinement: a ContinuousNet whose N_t = M double at the start of given epochs.
def _refining(digits: Path, epochs: int = 3) -> TrainConfig:
    return TrainConfig(
        model="continuousnet", dataset="mnist", data_dir=str(digits), method="euler",
        n_steps=1, refine_epochs=(1, 2), epochs=epochs, train_size=64, test_size=32,
        batch_size=32, lr=0.05, device="cpu", progress=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def refined_run(tmp_path_factory, digits):
    out = tmp_path_factory.mktemp("refined") / "run"
    lines: list[str] = []
    results = train(_refining(digits), out, log=lines.append)
    return out, results, lines


def test_refinement_doubles_n_steps_at_the_given_epochs(refined_run, digits):
    out, results, lines = refined_run
    metrics = json.loads((out / "metrics.json").read_text())
    assert [m["n_steps"] for m in metrics] == [1, 2, 4]
    params = [m["parameters"] for m in metrics]
    assert params[0] < params[1] < params[2] == results["parameters"]
    assert all(math.isfinite(m["train_loss"]) and m["test_acc"] is not None for m in metrics)
    assert [line.split(":")[0] for line in lines if "refined to" in line] == ["epoch 2", "epoch 3"]
    assert "refined to N_t = M = 4" in lines[-2] and "N_t 4" in lines[-1]
    # load_model rebuilds the refined model and gives the run's last test accuracy.
    model, config = load_model(out)
    assert config == _refining(digits) and model.n_steps == 4
    from odebench.training._data import load_splits

    _, test = load_splits(config)
    again = evaluate(model, test, "cross_entropy", batch_size=1000, device=torch.device("cpu"))
    assert again["acc"] == pytest.approx(results["final"]["test_acc"])


def test_a_run_resumed_across_a_refinement_ends_as_an_uninterrupted_one(
    tmp_path, refined_run, digits
):
    _, full, _ = refined_run
    # Two epochs (refined once), then a third: the resume refines the fresh model once
    # before loading, and the loop refines again at epoch 2 with the optimiser carried.
    out = tmp_path / "continued"
    train(_refining(digits, epochs=2), out, log=lambda line: None)
    continued = train(_refining(digits), out, resume=True, log=lambda line: None)
    assert _untimed([continued["final"]]) == _untimed([full["final"]])
    assert continued["parameters"] == full["parameters"]


def test_a_run_stopped_inside_a_refined_epoch_resumes_exactly(tmp_path, refined_run, digits):
    _, full, _ = refined_run
    out = tmp_path / "stopped"

    def stop_after_refining(line: str) -> None:
        if line.startswith("epoch 3: refined"):  # inside epoch 3, before its first batch
            signal.raise_signal(signal.SIGTERM)

    with pytest.raises(Interrupted, match="stopped at epoch 3, batch 1"):
        train(_refining(digits), out, log=stop_after_refining)
    state = torch.load(out / "checkpoint.pt", weights_only=True)
    assert (state["epoch"], state["batch"]) == (2, 1)
    model, _ = load_model(out)
    assert model.n_steps == 4  # refined at the start of the epoch it stopped in
    lines: list[str] = []
    resumed = train(_refining(digits), out, resume=True, log=lines.append)
    assert not any("refined to" in line for line in lines)  # not a second time
    assert _untimed([resumed["final"]]) == _untimed([full["final"]])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--refine-epochs", "2,1"], "`refine_epochs` must be a tuple of increasing positive"),
        (["--refine-epochs", "x"], "expected comma-separated epochs"),
        (["--n-steps", "0"], "argument --n-steps: expected a positive integer, got 0"),
        (["--refine-epochs", "1"], "`refine_epochs` applies to the ContinuousNet models only"),
        (["--method", "rk4"], "The fixed-step `method` 'rk4' needs `n_steps`"),
        (["--n-steps", "4"], "`n_steps` applies to fixed-step methods, not to the adaptive"),
        (["--method", "dopri"], "Unknown `method` 'dopri'; known methods:"),
        (["--gradient", "adjiont"], "argument --gradient: invalid choice: 'adjiont'"),
    ],
)
def test_cli_refinement_options_are_checked(args, message, capsys):
    argv = ["train", "--model", "toy-node", "--dataset", "annuli-1d", "--device", "cpu", *args]
    try:
        status = odebench.main(argv)
    except SystemExit as exc:  # argparse's own errors
        status = exc.code
    assert status == 2
    assert message in capsys.readouterr().err


def test_cli_trains_with_refinement(tmp_path, digits):
    out = tmp_path / "cli"
    status = odebench.main(
        ["train", "--model", "continuousnet", "--dataset", "mnist", "--data-dir", str(digits),
         "--method", "rk4", "--n-steps", "1", "--refine-epochs", "1", "--epochs", "2",
         "--train-size", "32", "--test-size", "16", "--batch-size", "16", "--device", "cpu",
         "--no-progress", "--out", str(out)]
    )  # fmt: skip
    assert status == 0
    config = json.loads((out / "config.json").read_text())["config"]
    assert (config["method"], config["n_steps"], config["refine_epochs"]) == ("rk4", 1, [1])
    assert [m["n_steps"] for m in json.loads((out / "metrics.json").read_text())] == [1, 2]


# -- a run that diverges stops on the first non-finite loss or weight, whatever the model --


def _mlp_args(digits: Path, out: Path, *more: str) -> list[str]:
    return [
        "train", "--model", "mlp", "--dataset", "mnist", "--data-dir", str(digits),
        "--train-size", "96", "--test-size", "32", "--batch-size", "32", "--optimizer", "sgd",
        "--momentum", "0", "--device", "cpu", "--no-progress", "--out", str(out), *more,
    ]  # fmt: skip


def test_a_model_without_an_ode_stops_on_a_nan_loss_and_keeps_the_last_finite_checkpoint(
    tmp_path, digits, capsys
):
    # Was: exit 0, the checkpoint of epoch 1 replaced with NaN weights, and a test
    # accuracy of the NaN network in results.json. Epoch 1 ends finite at this rate;
    # a batch of epoch 2 has a NaN loss.
    out = tmp_path / "run"
    assert odebench.main(_mlp_args(digits, out, "--lr", "1e4", "--epochs", "3")) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("odebench train: training failed: epoch 2, batch "), last
    assert "loss is nan" in last
    assert last.endswith(f"lower --lr; {out / 'checkpoint.pt'} holds epoch 1."), last
    state = torch.load(out / "checkpoint.pt", weights_only=True)
    assert (state["epoch"], state["batch"]) == (1, 0)
    assert all(t.isfinite().all() for t in state["model"].values())
    assert not (out / "results.json").exists()
    assert [m["epoch"] for m in json.loads((out / "metrics.json").read_text())] == [1]
    assert not (out / ".lock").exists()


def test_a_nan_test_loss_stops_the_run_before_it_is_recorded(tmp_path, digits, capsys):
    # At this rate epoch 1 trains on finite losses but the network it ends with
    # gives NaN on the test set: nothing of epoch 1 is recorded or saved.
    out = tmp_path / "run"
    assert odebench.main(_mlp_args(digits, out, "--lr", "1e8", "--epochs", "2")) == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("odebench train: training failed: epoch 1, evaluation: "), last
    assert "test loss is nan" in last and last.endswith("lower --lr."), last
    assert not (out / "checkpoint.pt").exists() and not (out / "results.json").exists()


def test_a_nan_weight_stops_the_run_though_the_loss_is_finite(tmp_path, monkeypatch):
    # A weight can go non-finite where no loss sees it (here: in the epoch's last
    # step; a ReLU that masks -inf would do too); the weights are checked before
    # every checkpoint.
    config = TrainConfig(**TOY, epochs=1, batch_size=32, train_size=64, progress=False)
    step, steps = torch.optim.Adam.step, []

    def poison(self, *args, **kwargs):
        step(self, *args, **kwargs)
        steps.append(1)
        if len(steps) == 2:
            with torch.no_grad():
                self.param_groups[0]["params"][0].view(-1)[0] = float("-inf")

    monkeypatch.setattr(torch.optim.Adam, "step", poison)
    with pytest.raises(TrainingFailedError, match=r"epoch 1, batch 2: the weight \S+ is not fin"):
        train(config, tmp_path / "run", log=lambda line: None)
    assert not (tmp_path / "run" / "checkpoint.pt").exists()


def test_the_checkpoint_writer_refuses_non_finite_weights(tmp_path):
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(path, {"epoch": 1, "model": {"w": torch.ones(2)}})
    with pytest.raises(ValueError, match=rf"{path}: not saved: the weight w is not finite"):
        save_checkpoint(path, {"epoch": 2, "model": {"w": torch.tensor([1.0, math.nan])}})
    assert torch.load(path, weights_only=True)["epoch"] == 1


# -- an implicit method's Newton iteration: its failure is the step size's, not the rate's --


def _implicit(out: Path, *more: str) -> list[str]:
    return [
        "train", "--model", "toy-node", "--dataset", "annuli-1d", "--optimizer", "adam",
        "--lr", "0.03", "--train-size", "256", "--batch-size", "32", "--epochs", "2",
        "--method", "implicit_euler", "--device", "cpu", "--no-progress", "--out", str(out),
        *more,
    ]  # fmt: skip


def test_newton_failing_at_a_step_size_is_not_blamed_on_the_learning_rate(tmp_path, capsys):
    # At this rate --n-steps 8 trains; --n-steps 4 stops in Newton's iteration, and
    # the line said "The weights have probably diverged: lower --lr".
    assert odebench.main(_implicit(tmp_path / "run", "--n-steps", "4")) == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("odebench train: training failed: epoch "), last
    assert "Newton" in last and "--lr" not in last, last
    assert "--solver-option NAME=VALUE" in last, last


def test_odecore_options_pass_through_by_odecore_names(tmp_path, capsys):
    config = TrainConfig(**TOY, method="implicit_euler", n_steps=4, solver_options={"max_iters": 3})
    assert config.spec.solver.newton.max_iters == 3
    assert TrainConfig.from_dict(config.to_dict()) == config
    out = tmp_path / "run"
    argv = _implicit(out, "--n-steps", "8", "--solver-option", "max_iters=12", "--epochs", "1")
    assert odebench.main(argv) == 0
    saved = json.loads((out / "config.json").read_text())["config"]
    assert saved["solver_options"] == {"max_iters": 12}


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (
            "max_iter=3",
            "Unknown option(s) ['max_iter'] for method 'implicit_euler'; known options:",
        ),
        ("max_iters=0", "`max_iters` must be a positive integer, got 0."),
        ("max_iters", "argument --solver-option: expected NAME=VALUE, got 'max_iters'"),
        ("n_steps=3", "`solver_options` cannot set n_steps; use `n_steps` (--n-steps)"),
        # Was: training failed at batch 1, blaming the learning rate.
        ("max_num_steps=3", "`solver_options` max_num_steps=3 is below `n_steps` 4"),
    ],
)
def test_a_bad_odecore_option_is_one_line(option, message, tmp_path, capsys):
    argv = _implicit(tmp_path / "run", "--n-steps", "4", "--solver-option", option)
    try:
        status = odebench.main(argv)
    except SystemExit as exc:  # argparse's own errors
        status = exc.code
    assert status == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and message in err, err


# -- provenance: every stretch of a run, its start and each resume, is recorded ------------


def test_a_resumed_run_records_where_each_of_its_stretches_came_from(tmp_path, monkeypatch):
    from odebench import _provenance

    out = tmp_path / "run"
    config = TrainConfig(**TOY, epochs=1, batch_size=32, train_size=64, progress=False)
    first = _provenance.segment()
    monkeypatch.setattr(_provenance, "segment", lambda: {**first, "source": "before"})
    once = train(config, out, log=lambda line: None)
    assert once["provenance"]["resumed"] is False
    assert [s["source"] for s in once["provenance"]["segments"]] == ["before"]
    monkeypatch.undo()
    twice = train(config.__class__(**{**config.to_dict(), "epochs": 2}), out, resume=True,
                  log=lambda line: None)  # fmt: skip
    prov = twice["provenance"]
    assert prov["resumed"] is True and len(prov["segments"]) == 2
    before, after = prov["segments"]
    assert before["source"] == "before" and after["source"] == _provenance.source_hash()
    assert (prov["commit"], prov["dirty"]) == (after["commit"], after["dirty"])
    assert all(s["started"] <= s["finished"] for s in prov["segments"])
    assert json.loads((out / "results.json").read_text())["provenance"] == prov
    environment = json.loads((out / "config.json").read_text())["environment"]
    assert environment["device"] == "cpu" and environment["processes"] == 1
    assert set(environment["versions"]) >= {"torch", "odecore", "odebench"}


@pytest.mark.parametrize(("model", "dataset"), [("mlp", "mnist"), ("toy-node", "spirals")])
def test_the_test_subset_depends_on_the_test_size_and_seed_not_the_train_size(
    model, dataset, digits
):
    from odebench.training import load_splits

    def test_set(train_size: int | None, seed: int = 0) -> torch.Tensor:
        config = TrainConfig(model=model, dataset=dataset, data_dir=str(digits), seed=seed,
                             train_size=train_size, test_size=32)  # fmt: skip
        return load_splits(config)[1].inputs

    alone = test_set(None)
    assert torch.equal(test_set(16), alone) and torch.equal(test_set(64), alone)
    assert not torch.equal(test_set(None, seed=1), alone)  # the seed draws it


def test_augmented_batches_are_cropped_as_stored_then_normalised(digits):
    """``--augment`` crops the uint8 images and normalises them after, as the data page
    says: a crop's padding is black, not the data set's mean (which 0.0 is once
    normalised)."""
    from odebench.data import random_crop
    from odebench.training import load_splits
    from odebench.training._loop import _dims, _task

    config = TrainConfig(model="mlp", dataset="mnist", data_dir=str(digits), augment=True,
                         train_size=16, test_size=8, progress=False)  # fmt: skip
    train_set, test_set = load_splits(config)
    task = _task(config, (train_set, test_set), _dims(train_set), torch.device("cpu"),
                 settings={}, row=lambda epoch: {}, after_epoch=lambda rows: None)  # fmt: skip
    images, labels = train_set.inputs[:16], train_set.targets[:16]
    assert task.augment is not None
    got, got_labels = task.augment((images, labels), torch.Generator().manual_seed(1))
    cropped = random_crop(images, padding=4, generator=torch.Generator().manual_seed(1))
    assert torch.equal(got, train_set.normalize(cropped)) and torch.equal(got_labels, labels)
    black = train_set.normalize(torch.zeros(1, 1, 1, 1, dtype=torch.uint8)).item()
    assert black < -0.1 and (got == black).sum() > (images == 0).sum()  # padded black


@pytest.mark.parametrize(("kind", "classes"), [("cross_entropy", 3), ("mse", None)])
def test_evaluate_is_the_eval_mode_mean_over_every_example_in_the_models_dtype(kind, classes):
    """Ten examples in batches of 3 (the last of 1), a float64 model with dropout and
    batch norm: the loss and accuracy of the whole set in eval mode, to float64. Before,
    the model's output was cast to float32 before the loss, which then lost 8 digits."""
    from odebench.data import Dataset
    from torch import nn

    x = torch.randn(10, 4, dtype=torch.float64)
    y = torch.randint(0, 3, (10,)) if classes else torch.randn(10, 2, dtype=torch.float64)
    layers = (nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Dropout(0.5), nn.Linear(8, classes or 2))
    model = nn.Sequential(*layers).double()
    model(3 * torch.randn(16, 4, dtype=torch.float64))  # running statistics of batch norm
    got = evaluate(
        model, Dataset(x, y, "toy", classes), kind, batch_size=3, device=torch.device("cpu")
    )
    assert model.training
    with torch.no_grad():
        out = model.eval()(x)
    if classes:
        loss, acc = nn.functional.cross_entropy(out, y), (out.argmax(1) == y).double().mean()
        assert got["acc"] == float(acc)
    else:
        loss = nn.functional.mse_loss(out, y)
    assert got["loss"] == pytest.approx(float(loss), rel=1e-14)
