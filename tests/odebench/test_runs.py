"""Run folders: one run at a time, nothing overwritten, resumes and checkpoints checked."""

from __future__ import annotations

import errno
import json
import os
import pickle
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import odebench
import pytest
import torch
from odebench import _provenance
from odebench.experiments import RunOptions, publish, register, run_experiment
from odebench.experiments._registry import _REGISTRY
from odebench.training import RunExistsError, TrainConfig, load_model, train
from subprocess_env import odebench_env
from test_cli_runs import _run
from test_training import TOY, _train_cmd, _two_processes, _wait_for

TOY_ARGS = [
    "train", "--model", "toy-node", "--dataset", "annuli-1d", "--optimizer", "adam",
    "--lr", "3e-3", "--train-size", "64", "--batch-size", "32", "--device", "cpu",
    "--no-progress",
]  # fmt: skip


def _main(*args: str) -> int:
    """``odebench.main`` in this process; argparse's exits become statuses."""
    try:
        return odebench.main(list(args))
    except SystemExit as exc:
        return int(exc.code or 0)


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def _lock(out: Path, pid: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    holder = {"pid": pid, "host": socket.gethostname(), "started": "now", "command": "test"}
    (out / ".lock").write_text(json.dumps(holder))


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A finished one-epoch toy run; tests copy it before they touch it."""
    out = tmp_path_factory.mktemp("finished") / "run"
    assert odebench.main([*TOY_ARGS, "--out", str(out)]) == 0
    return out


@pytest.fixture
def run_copy(tmp_path, finished) -> Path:
    out = tmp_path / "run"
    out.mkdir()
    for f in finished.iterdir():
        (out / f.name).write_bytes(f.read_bytes())
    return out


def _files(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


# -- locking ---------------------------------------------------------------------------


def test_a_second_run_into_a_folder_in_use_is_refused(tmp_path):
    out = tmp_path / "run"
    log = (tmp_path / "first.log").open("w")
    cmd = _train_cmd(out, 100_000)  # runs until stopped
    first = subprocess.Popen(cmd, stderr=log, env=odebench_env())
    try:
        _wait_for(out / "config.json", first)
        config = (out / "config.json").read_bytes()
        second = _run(*cmd[3:-2], "--lr", "0.1", "--out", str(out))
        assert second.returncode == 2
        line = _one_line(second.stderr)
        assert f"is in use by process {first.pid} on host {socket.gethostname()}" in line
        assert "choose another --out" in line
        assert first.poll() is None  # the first run goes on, its files its own
        assert (out / "config.json").read_bytes() == config
    finally:
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=120) == 130
        log.close()
    assert not (out / ".lock").exists()  # released on SIGTERM as on success
    assert "checkpoint saved" in (tmp_path / "first.log").read_text()


def test_a_lock_of_a_live_process_is_respected(tmp_path):
    out = tmp_path / "run"
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        _lock(out, sleeper.pid)
        with pytest.raises(RunExistsError, match=f"in use by process {sleeper.pid} "):
            train(TrainConfig(**TOY, train_size=64, batch_size=32), out, log=lambda _: None)
        assert json.loads((out / ".lock").read_text())["pid"] == sleeper.pid  # left alone
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_stale_lock_of_a_killed_run_is_taken_over(tmp_path):
    out = tmp_path / "run"
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    _lock(out, ended.pid)
    lines: list[str] = []
    config = TrainConfig(**TOY, train_size=64, batch_size=32, progress=False)
    train(config, out, log=lines.append)
    assert f"took over the lock of process {ended.pid}" in lines[0]
    assert (out / "results.json").exists() and not (out / ".lock").exists()


def test_a_failed_run_releases_its_lock_and_the_folder_it_made(tmp_path):
    out = tmp_path / "new"
    config = TrainConfig(model="mlp", dataset="mnist", data_dir=str(tmp_path / "none"))
    with pytest.raises(FileNotFoundError):
        train(config, out, log=lambda _: None)
    assert not out.exists()


def test_under_torchrun_every_process_refuses_a_folder_in_use(tmp_path):
    out = tmp_path / "run"
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        _lock(out, sleeper.pid)
        proc = _two_processes("-m", "odebench", *TOY_ARGS, "--out", str(out))
    finally:
        sleeper.kill()
        sleeper.wait()
    assert proc.returncode != 0
    # Both processes stop (none waits for the other in a collective) and write nothing.
    assert f"is in use by process {sleeper.pid}" in proc.stderr, proc.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == [".lock"]


# -- no overwrite ------------------------------------------------------------------------


def test_a_finished_run_is_never_overwritten_without_overwrite(run_copy, capsys):
    before = _files(run_copy)
    assert _main(*TOY_ARGS, "--seed", "1", "--out", str(run_copy)) == 2
    line = _one_line(capsys.readouterr().err)
    assert "holds a run already; pass --resume to continue it, --overwrite to move it" in line
    assert _files(run_copy) == before


def test_a_batch_larger_than_the_training_set_leaves_no_run_behind(tmp_path, capsys):
    # Was: refused after config.json was written, so the corrected command was refused
    # in turn as "holds a run already".
    out = tmp_path / "run"
    args = [*TOY_ARGS, "--out", str(out)]
    assert _main(*args[: args.index("32")], "65", *args[args.index("32") + 1 :]) == 2
    assert "`batch_size` 65 exceeds the 64 training examples" in _one_line(capsys.readouterr().err)
    assert not out.exists()
    assert _main(*args) == 0


def test_overwrite_moves_the_old_run_aside(run_copy, capsys):
    before = _files(run_copy)
    assert _main(*TOY_ARGS, "--seed", "1", "--out", str(run_copy), "--overwrite") == 0
    err = capsys.readouterr().err
    [aside] = run_copy.parent.glob("run.old-*")
    assert f"moved the run in {run_copy} aside to {aside}" in err
    assert _files(aside) == before  # the old run, whole
    assert json.loads((run_copy / "config.json").read_text())["config"]["seed"] == 1


@pytest.fixture
def tiny_experiment():
    """An experiment that writes its results only, registered for one test."""

    @register("tiny-test", "writes results.json")
    def tiny(options: RunOptions, log) -> dict:
        summary = {"seed": options.seed}
        (options.out / "results.json").write_text(json.dumps(summary))
        return summary

    yield "tiny-test"
    del _REGISTRY["tiny-test"]


def test_an_experiment_folder_is_locked_and_never_overwritten(tmp_path, tiny_experiment):
    out = tmp_path / "exp"
    run_experiment(tiny_experiment, RunOptions(out=out), log=lambda _: None)
    assert sorted(p.name for p in out.iterdir()) == ["results.json"]
    with pytest.raises(RunExistsError, match="holds a run already"):
        run_experiment(tiny_experiment, RunOptions(out=out, seed=1), log=lambda _: None)
    run_experiment(tiny_experiment, RunOptions(out=out, seed=2, resume=True), log=print)
    lines: list[str] = []
    run_experiment(tiny_experiment, RunOptions(out=out, seed=3, overwrite=True), lines.append)
    [aside] = tmp_path.glob("exp.old-*")
    assert json.loads((aside / "results.json").read_text()) == {"seed": 2}
    assert json.loads((out / "results.json").read_text()) == {"seed": 3}
    assert lines == [f"moved the run in {out} aside to {aside}"]
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        _lock(out, sleeper.pid)
        with pytest.raises(RunExistsError, match=f"in use by process {sleeper.pid}"):
            run_experiment(tiny_experiment, RunOptions(out=out, resume=True), log=print)
    finally:
        sleeper.kill()
        sleeper.wait()


def test_an_experiment_is_not_resumed_in_the_folder_of_another_run(tmp_path, tiny_experiment):
    # Was: the folder's results.json and report.md replaced by the other experiment's.
    other = tmp_path / "other"
    other.mkdir()
    (other / "results.json").write_text(json.dumps({"experiment": "quickstart"}))
    trained = tmp_path / "trained"
    trained.mkdir()
    (trained / "config.json").write_text("{}")
    (trained / "results.json").write_text(json.dumps({"model": "mlp"}))
    for out, what in ((other, "a run of 'quickstart'"), (trained, "a run of `odebench train`")):
        before = _files(out)
        with pytest.raises(RunExistsError, match=f"holds {re.escape(what)}, not of 'tiny-test'"):
            run_experiment(tiny_experiment, RunOptions(out=out, resume=True), log=print)
        assert _files(out) == before
    (other / "results.json").write_text(json.dumps({"experiment": "tiny-test"}))
    run_experiment(tiny_experiment, RunOptions(out=other, resume=True), log=print)


# -- resume checks the settings ----------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "changes"),
    [
        (["--lr", "0.01", "--seed", "3"], ["lr 0.003 -> 0.01", "seed 0 -> 3"]),
        (["--train-size", "96"], ["train_size 64 -> 96"]),
        (["--model", "toy-anode"], ["model 'toy-node' -> 'toy-anode'"]),
        (["--optimizer", "sgd"], ["optimizer 'adam' -> 'sgd'"]),
    ],
)
def test_resume_with_changed_settings_is_refused(run_copy, capsys, args, changes):
    before = _files(run_copy)
    assert _main(*TOY_ARGS, "--out", str(run_copy), "--resume", "--epochs", "2", *args) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"{run_copy}: --resume with settings that differ from the run's: " in line
    for change in changes:
        assert change in line
    assert "only compile, data_dir, device, epochs, progress may change on resume" in line
    assert _files(run_copy) == before


def test_resume_may_change_the_epochs_device_and_progress(run_copy):
    args = [a for a in TOY_ARGS if a != "--no-progress"]
    assert _main(*args, "--out", str(run_copy), "--resume", "--epochs", "2", "--progress") == 0
    config = json.loads((run_copy / "config.json").read_text())["config"]
    assert (config["epochs"], config["progress"]) == (2, True)
    assert len(json.loads((run_copy / "metrics.json").read_text())) == 2


def test_a_run_saved_before_a_setting_existed_resumes_with_its_default(run_copy):
    state = torch.load(run_copy / "checkpoint.pt", weights_only=True)
    del state["config"]["solver_options"]  # a run of the release before it
    torch.save(state, run_copy / "checkpoint.pt")
    assert _main(*TOY_ARGS, "--out", str(run_copy), "--resume", "--epochs", "2") == 0


def test_resume_cannot_shorten_a_run(run_copy, capsys):
    assert _main(*TOY_ARGS, "--out", str(run_copy), "--resume", "--epochs", "0") == 2
    assert "has reached epoch 1 already; resume it with --epochs 1 or more, not 0" in (
        _one_line(capsys.readouterr().err)
    )


def test_resume_without_a_checkpoint_keeps_the_results(run_copy, capsys):
    (run_copy / "checkpoint.pt").unlink()
    before = _files(run_copy)
    assert _main(*TOY_ARGS, "--out", str(run_copy), "--resume") == 2
    assert "holds a run's results but no checkpoint.pt" in _one_line(capsys.readouterr().err)
    assert _files(run_copy) == before


# -- bad checkpoints ---------------------------------------------------------------------


class _Payload:
    """What a malicious checkpoint holds: unpickling it would run a shell command."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _truncated(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _empty(path: Path) -> None:
    path.write_bytes(b"")


def _garbage(path: Path) -> None:
    path.write_bytes(b"not a checkpoint at all\n" * 20)


def _malicious(path: Path) -> None:
    torch.save({"epoch": 1, "model": _Payload(path.parent / "PWNED")}, path)


def _malicious_pickle(path: Path) -> None:
    payload = {"epoch": 1, "model": _Payload(path.parent / "PWNED")}
    path.write_bytes(pickle.dumps(payload, protocol=2))  # torch's own legacy protocol


def _foreign(path: Path) -> None:
    torch.save({"weights": torch.ones(3)}, path)


@pytest.mark.parametrize(
    ("spoil", "what"),
    [
        (_truncated, "is truncated or corrupt"),
        (_empty, "is empty"),
        (_garbage, "is truncated or corrupt"),
        (_malicious, "asks for code to run (posix.system)"),
        (_malicious_pickle, "asks for code to run (posix.system)"),
        (_foreign, "is not a checkpoint of an odebench training run"),
    ],
)
def test_a_bad_checkpoint_is_refused_and_never_run(run_copy, capsys, spoil, what):
    path = run_copy / "checkpoint.pt"
    spoil(path)
    assert _main(*TOY_ARGS, "--out", str(run_copy), "--resume", "--epochs", "2") == 2
    line = _one_line(capsys.readouterr().err)
    assert f"{path} {what}" in line
    assert "Delete it, or pass --overwrite" in line
    assert "weights_only" not in line
    assert not (run_copy / "PWNED").exists()
    with pytest.raises(ValueError, match=re.escape(what)):
        load_model(run_copy)
    assert not (run_copy / "PWNED").exists()


def test_the_payload_would_have_run_when_unpickled(tmp_path):
    # The malicious file is real: plain unpickling creates the file the loader never does.
    _malicious_pickle(tmp_path / "checkpoint.pt")
    pickle.loads((tmp_path / "checkpoint.pt").read_bytes())  # on purpose
    assert (tmp_path / "PWNED").exists()


# -- failures during evaluation; bad paths and numbers -----------------------------------


def test_a_solver_failure_during_evaluation_is_reported_like_one_in_training(tmp_path, capsys):
    # One batch with the initial weights trains; the step of lr 1e6 breaks the evaluation.
    args = [
        "train", "--model", "toy-node", "--dataset", "annuli-1d", "--train-size", "32",
        "--batch-size", "32", "--lr", "1e6", "--momentum", "0", "--device", "cpu",
        "--no-progress", "--out", str(tmp_path / "run"),
    ]  # fmt: skip
    assert _main(*args) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("odebench train: training failed: epoch 1, evaluation: ")
    assert last.endswith("lower --lr.")
    assert not (tmp_path / "run" / ".lock").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--out", "{file}"], "argument --out: {file} is a file, not a folder"),
        (["--out", "{file}/run"], "argument --out: {file}/run: {file} is a file, not a folder"),
        (["--weight-decay", "nan"], "argument --weight-decay: expected a finite number >= 0"),
        (["--weight-decay", "inf"], "argument --weight-decay: expected a finite number >= 0"),
        (["--weight-decay", "-1"], "argument --weight-decay: expected a finite number >= 0"),
        (["--momentum", "nan"], "argument --momentum: expected a number in [0, 1), got nan"),
        (["--lr", "inf"], "argument --lr: expected a positive number, got inf"),
        (["--gamma", "nan"], "argument --gamma: expected a positive number, got nan"),
        (["--rtol=-1e-3"], "argument --rtol: expected a positive number, got -1e-3"),
        (["--seed", "99999999999999999999"],
         "argument --seed: expected a non-negative integer of at most 4294967295"),
        (["--seed", "-1"], "argument --seed: expected a non-negative integer, got -1"),
        (["--batch-size", str(2**63)], "argument --batch-size: expected a positive integer of"),
        (["--epochs", str(2**64)], "argument --epochs: expected a non-negative integer of"),
        (["--milestones", "0,3"], "argument --milestones: expected comma-separated epochs"),
        (["--resume", "--overwrite"], "argument --overwrite: not allowed with argument --resume"),
    ],
)  # fmt: skip
def test_bad_paths_and_numbers_name_the_flag_before_any_data_is_read(
    tmp_path, capsys, args, message
):
    file = tmp_path / "a-file"
    file.write_text("")
    args = [a.format(file=file) for a in args]
    # The data directory does not exist: reading data would fail with another message.
    base = ["train", "--model", "odenet", "--dataset", "mnist", "--data-dir", str(tmp_path / "x")]
    assert _main(*base, *args) == 2
    assert message.format(file=file) in _one_line(capsys.readouterr().err)


def test_an_output_path_that_is_a_file_is_refused_by_train(tmp_path):
    file = tmp_path / "a-file"
    file.write_text("")
    with pytest.raises(ValueError, match=f"--out {file} is a file, not a folder"):
        train(TrainConfig(**TOY), file, log=lambda _: None)
    assert file.read_text() == ""


def test_the_lock_file_is_written_whole(tmp_path):
    lines: list[str] = []
    from odebench.training._run_dir import RunFolder

    folder = RunFolder(tmp_path / "run")
    folder.acquire(lines.append)
    try:
        holder = json.loads((folder.path / ".lock").read_text())
        lines.append(holder["host"])
        assert holder["pid"] == os.getpid()
        assert time.strptime(holder["started"], "%Y-%m-%d %H:%M:%S")
    finally:
        folder.release()
    assert lines == [socket.gethostname()]
    assert not (tmp_path / "run").exists()


# -- one line, no traceback, for what a user can get wrong -------------------------------


def _spoil_checkpoint(path: Path, change) -> None:
    state = torch.load(path, weights_only=True)
    change(state)
    torch.save(state, path)


def _reshape_first(state: dict) -> None:
    name = next(iter(state["model"]))
    state["model"][name] = torch.zeros(3, 3)


def _drop_first(state: dict) -> None:
    state["model"].pop(next(iter(state["model"])))


@pytest.mark.parametrize(
    ("change", "what"),
    [
        (_reshape_first, r"does not fit this run's model or optimiser: size mismatch for "),
        (_drop_first, r"does not fit this run's model or optimiser: Missing key\(s\)"),
        (lambda s: s.update(epoch=-3), r"records epoch -3, batch 0; a checkpoint's position"),
        (lambda s: s.update(batch=-1), r"records epoch 1, batch -1; a checkpoint's position"),
    ],
    ids=["wrong-shape", "missing-key", "negative-epoch", "negative-batch"],
)
def test_a_checkpoint_that_does_not_fit_exits_2_naming_it(run_copy, capsys, change, what):
    _spoil_checkpoint(run_copy / "checkpoint.pt", change)
    assert _main(*TOY_ARGS, "--out", str(run_copy), "--resume", "--epochs", "2") == 2
    err = capsys.readouterr().err  # the model's one-line banner may come first
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 2, err
    line = err.strip().splitlines()[-1]
    assert re.search(f"{re.escape(str(run_copy / 'checkpoint.pt'))} {what}", line), line


@pytest.mark.parametrize("inside", [False, True], ids=["the-run-folder", "below-it"])
def test_run_all_refuses_an_out_in_a_run_folder(run_copy, capsys, inside):
    out = run_copy / "sub" if inside else run_copy
    assert _main("run", "all", "--quick", "--out", str(out)) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"--out {out} is " in line and "give it a folder of its own" in line
    assert not (run_copy / "quickstart").exists() and not (run_copy / "sub").exists()


def test_download_into_a_folder_that_cannot_be_made_exits_2(tmp_path, capsys):
    (tmp_path / "a-file").write_text("")
    assert _main("download", "mnist", "--data-dir", str(tmp_path / "a-file" / "sub")) == 2
    line = _one_line(capsys.readouterr().err.split("\n", 1)[1])  # after "downloading ..."
    assert f"cannot write {tmp_path / 'a-file' / 'sub'}" in line and "Not a directory" in line


def test_download_into_an_unwritable_folder_exits_2(tmp_path, capsys, monkeypatch):
    def refuse(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "mkdir", refuse)  # root may write anywhere: simulate it
    assert _main("download", "mnist", "--data-dir", str(tmp_path / "ro")) == 2
    line = _one_line(capsys.readouterr().err.split("\n", 1)[1])
    assert f"cannot write {tmp_path / 'ro'}" in line and "Permission denied" in line


def _disk_full(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_full_disk_at_the_lock_is_one_line_naming_the_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(os, "fsync", _disk_full)  # the lock is written, then synced
    out = tmp_path / "run"
    assert _main(*TOY_ARGS, "--out", str(out)) == 2
    line = _one_line(capsys.readouterr().err)
    assert line == (
        f"odebench train: error: --out {out}: cannot write its lock there (No space left on "
        "device); free some space, or choose another --out"
    )
    assert not out.exists()


def test_a_full_disk_at_the_checkpoint_is_one_line_and_keeps_the_last(
    run_copy, monkeypatch, capsys
):
    before = (run_copy / "checkpoint.pt").read_bytes()
    monkeypatch.setattr(torch, "save", _disk_full)
    assert _main(*TOY_ARGS, "--epochs", "2", "--resume", "--out", str(run_copy)) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last == (
        f"odebench train: error: cannot write checkpoint.pt in {run_copy} (No space left on "
        "device); every file there is whole, as last written: free some space, then --resume"
    )
    assert (run_copy / "checkpoint.pt").read_bytes() == before
    assert sorted(p.name for p in run_copy.iterdir() if p.name.startswith(".")) == []


def _published_run(root: Path, results: str) -> Path:
    run = root / "run"
    run.mkdir()
    (run / "report.md").write_text("# Run\n")
    (run / "results.json").write_text(results)
    return run


@pytest.mark.parametrize(
    ("results", "what"),
    [
        ("[1, 2]", "holds a JSON list, not the object of an experiment's results"),
        ("{bad", "is not valid JSON (Expecting property name"),
    ],
)
def test_publish_names_a_results_json_that_is_not_an_object(tmp_path, capsys, results, what):
    run = _published_run(tmp_path, results)
    assert _main("publish", str(run), "--to", str(tmp_path / "pub")) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"{run / 'results.json'} {what}" in line
    assert not (tmp_path / "pub").exists()


@pytest.mark.parametrize("name", ["report.md", "results.json"])
def test_publish_names_a_file_that_is_not_utf8(tmp_path, checkout, capsys, name):
    run = _published_run(tmp_path, _clean(_git(checkout, "rev-parse", "HEAD")))
    (run / name).write_bytes(b"# R\xe9sultats\n")  # Latin-1
    assert _main("publish", str(run), "--to", str(tmp_path / "pub")) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"{run / name} is not UTF-8 text (byte 0xe9 at offset 3)" in line, line
    assert not (tmp_path / "pub").exists()
    if name == "report.md":  # `report` reads it too
        assert _main("report", str(run), "--out", str(tmp_path / "all.md")) == 2
        assert f"{run / name} is not UTF-8 text" in _one_line(capsys.readouterr().err)


@pytest.mark.parametrize("below", [False, True], ids=["a-file", "under-a-file"])
def test_publish_to_a_file_exits_2(tmp_path, capsys, below):
    run = _published_run(tmp_path, '{"mode": "standard"}')
    (tmp_path / "dest").write_text("not a folder")
    to = tmp_path / "dest" / "more" if below else tmp_path / "dest"
    assert _main("publish", str(run), "--to", str(to)) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"{tmp_path / 'dest'} is a file; --to needs a folder" in line
    assert (tmp_path / "dest").read_text() == "not a folder"


def test_train_with_an_implicit_method_and_n_steps(tmp_path):
    # Was refused: "`n_steps` applies to fixed-step methods, not to the adaptive ...".
    out = tmp_path / "run"
    assert _main(*TOY_ARGS, "--method", "implicit_euler", "--n-steps", "4", "--out", str(out)) == 0
    saved = json.loads((out / "config.json").read_text())["config"]
    assert (saved["method"], saved["n_steps"]) == ("implicit_euler", 4)


# -- publish: only a run a sceptic can check, only its own files ---------------------------


def _git(cwd: Path, *args: str) -> str:
    command = ["git", "-c", "user.name=test", "-c", "user.email=test@example.org", *args]
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def _clean(commit: str) -> str:
    """A results.json of a standard run made at ``commit`` from a clean tree."""
    return json.dumps({"mode": "standard", "provenance": {"commit": commit, "dirty": False}})


@pytest.fixture
def checkout(tmp_path, monkeypatch) -> Path:
    """A git repository with one commit on ``main`` and one on a side branch; publish
    checks commits against it."""
    repo = tmp_path / "checkout"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    for branch in ("main", "side"):
        if branch == "side":
            _git(repo, "checkout", "-q", "-b", "side")
        (repo / f"{branch}.txt").write_text(branch)
        _git(repo, "add", f"{branch}.txt")
        _git(repo, "commit", "-q", "--no-gpg-sign", "-m", branch)
    _git(repo, "checkout", "-q", "main")
    monkeypatch.chdir(repo)
    monkeypatch.setattr(_provenance, "repository", lambda: repo)
    return repo


def test_publish_takes_a_clean_run_of_the_current_history(tmp_path, checkout, capsys):
    first = _git(checkout, "rev-parse", "HEAD")
    run = _published_run(tmp_path, _clean(first))
    (checkout / "later.txt").write_text("later")
    _git(checkout, "add", "later.txt")
    _git(checkout, "commit", "-q", "--no-gpg-sign", "-m", "later")  # first is an ancestor
    assert _main("publish", str(run), "--to", str(tmp_path / "pub")) == 0
    assert "published" in capsys.readouterr().err
    assert json.loads((tmp_path / "pub" / "run" / "results.json").read_text())["provenance"]


def test_publish_into_a_runs_folder_is_refused(tmp_path, checkout, capsys):
    # Was: `publish runs/x --to runs` removed runs/x's report.md, results.json and figures
    # as an earlier publish's, then failed to copy them.
    run = _published_run(tmp_path, _clean(_git(checkout, "rev-parse", "HEAD")))
    (run / "report.md").write_text("# Run\n\n![loss](loss.png)\n")
    (run / "loss.png").write_bytes(b"png")
    before = _files(run)
    assert _main("publish", str(run), "--to", str(tmp_path)) == 2  # to tmp_path/run
    assert "is the run's own folder" in _one_line(capsys.readouterr().err)
    assert _files(run) == before
    # Was: another run's folder of that name lost its report.md and results.json as well.
    other = tmp_path / "other" / "run"
    (other / "node").mkdir(parents=True)
    (other / "node" / "checkpoint.pt").write_bytes(b"weights")
    (other / "report.md").write_text("# Other run\n")
    assert _main("publish", str(run), "--to", str(other.parent)) == 2
    assert "holds a run, not a published report" in _one_line(capsys.readouterr().err)
    assert (other / "report.md").read_text() == "# Other run\n"


@pytest.mark.parametrize("commit", ["side", "0123456789abcdef0123456789abcdef01234567"])
def test_publish_refuses_a_commit_not_in_the_current_history(tmp_path, checkout, capsys, commit):
    if commit == "side":  # a commit the repository holds, on another branch
        commit = _git(checkout, "rev-parse", "side")
    run = _published_run(tmp_path, _clean(commit))
    assert _main("publish", str(run), "--to", str(tmp_path / "pub")) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"ran at {commit[:10]}, which is not in the current history (HEAD)" in line
    assert not (tmp_path / "pub").exists()


@pytest.mark.parametrize(
    ("provenance", "why"),
    [
        (None, "records no commit (no provenance): rerun it from a clean checkout"),
        ({"dirty": False}, "records no commit (no provenance)"),
        ({"commit": "HEAD", "dirty": True}, "ran from a dirty tree at "),
        ({"commit": "HEAD", "dirty": None}, "ran from a dirty tree at "),
        ({"commit": "abc123", "dirty": False}, "records the commit 'abc123', which is not 40"),
    ],
    ids=["none", "no-commit", "dirty", "dirty-unknown", "short-commit"],
)
def test_publish_refuses_a_run_without_a_clean_commit(tmp_path, checkout, capsys, provenance, why):
    doc: dict = {"mode": "standard"}
    if provenance is not None:
        head = _git(checkout, "rev-parse", "HEAD")
        doc["provenance"] = {k: head if v == "HEAD" else v for k, v in provenance.items()}
    run = _published_run(tmp_path, json.dumps(doc))
    assert _main("publish", str(run), "--to", str(tmp_path / "pub")) == 2
    assert f"{run} {why}" in _one_line(capsys.readouterr().err)
    assert not (tmp_path / "pub").exists()


def _resumed_run(root: Path, head: str, segments: list[dict] | None) -> Path:
    """An experiment resumed at ``head`` from a clean tree, with one training whose
    stretches are ``segments`` (``None``: a training that recorded none)."""
    doc = {"mode": "standard", "provenance": {"commit": head, "dirty": False, "resumed": True,
                                              "source": "now"}}  # fmt: skip
    run = _published_run(root, json.dumps(doc))
    (run / "a").mkdir()
    (run / "a" / "config.json").write_text("{}")
    training = {"epochs": 2} | ({"provenance": {"segments": segments}} if segments else {})
    (run / "a" / "results.json").write_text(json.dumps(training))
    return run


def _part(commit: str, dirty: bool, source: str | None) -> dict:
    return {"commit": commit, "dirty": dirty, "source": source, "started": "then", "finished": "x"}


def test_publish_refuses_a_resumed_run_part_of_which_ran_other_code(tmp_path, checkout, capsys):
    # Was published: the provenance read {commit: later, dirty: false, resumed: true}.
    first = _git(checkout, "rev-parse", "HEAD")
    (checkout / "later.txt").write_text("later")
    _git(checkout, "add", "later.txt")
    _git(checkout, "commit", "-q", "--no-gpg-sign", "-m", "later")
    head = _git(checkout, "rev-parse", "HEAD")
    parts = [_part(first, True, "then"), _part(head, False, "now")]
    run = _resumed_run(tmp_path, head, parts)
    assert _main("publish", str(run), "--to", str(tmp_path / "pub")) == 2
    line = _one_line(capsys.readouterr().err)
    assert line.endswith(
        f"{run}: its training {run / 'a'} ran a part at {first[:10]} from a dirty tree "
        f"(started then) with code other than {head[:10]}'s: rerun it with --overwrite"
    ), line
    assert not (tmp_path / "pub").exists()


@pytest.mark.parametrize("parts", ["same-code", "same-clean-commit"])
def test_publish_takes_a_resumed_run_whose_parts_ran_the_same_code(
    tmp_path, checkout, capsys, parts
):
    head = _git(checkout, "rev-parse", "HEAD")
    # A dirty tree at another commit whose packages' sources were the same; or, with
    # no hash recorded, the same commit from a clean tree.
    first = _part("0" * 40, True, "now") if parts == "same-code" else _part(head, False, None)
    run = _resumed_run(tmp_path, head, [first, _part(head, False, "now")])
    assert _main("publish", str(run), "--to", str(tmp_path / "pub")) == 0


def test_publish_refuses_a_resumed_run_whose_trainings_record_no_segments(
    tmp_path, checkout, capsys
):
    run = _resumed_run(tmp_path, _git(checkout, "rev-parse", "HEAD"), None)
    assert _main("publish", str(run), "--to", str(tmp_path / "pub")) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"{run} was resumed, but its training {run / 'a'} records no segments" in line


def test_publish_reads_the_segments_of_a_tasks_training_from_its_checkpoint(
    tmp_path, checkout, capsys
):
    """A task's training (``fit``) writes no results.json, its segments are in its
    checkpoint alone: publish took a resumed run part of which ran from a dirty tree."""
    head = _git(checkout, "rev-parse", "HEAD")
    doc = {"mode": "standard", "provenance": {"commit": head, "dirty": False, "resumed": True}}
    run = _published_run(tmp_path, json.dumps(doc))
    (run / "a").mkdir()
    (run / "a" / "metrics.json").write_text("[]")
    parts = [_part(head, True, "then"), _part(head, False, None)]
    state = {"epoch": 2, "batch": 0, "model": {}, "optimizer": {}, "rng": torch.zeros(1),
             "metrics": [], "segments": parts}  # fmt: skip
    torch.save(state, run / "a" / "checkpoint.pt")
    assert _main("publish", str(run), "--to", str(tmp_path / "pub")) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"its training {run / 'a'} ran a part at {head[:10]} from a dirty tree" in line
    assert not (tmp_path / "pub").exists()


def test_publish_checks_commits_against_this_checkout(tmp_path):
    top = _provenance.repository()
    if top is None:
        pytest.skip("not run from a git checkout")
    run = _published_run(tmp_path, _clean(_git(top, "rev-parse", "HEAD")))
    assert [str(f) for f in publish(run, tmp_path / "pub")] == ["report.md", "results.json"]
    (run / "results.json").write_text(_clean("f" * 40))
    with pytest.raises(ValueError, match="which is not in the current history"):
        publish(run, tmp_path / "pub")


@pytest.mark.parametrize("name", ["report.md", "results.json", "loss.png"])
@pytest.mark.parametrize("target", ["outside", "inside"])
def test_publish_copies_no_symbolic_link(tmp_path, checkout, capsys, name, target):
    run = _published_run(tmp_path, _clean(_git(checkout, "rev-parse", "HEAD")))
    (run / "report.md").write_text("# Run\n\n![loss](loss.png)\n")
    (run / "loss.png").write_bytes(b"png")
    secret = tmp_path / "secret" if target == "outside" else run / "elsewhere" / "secret"
    secret.parent.mkdir(exist_ok=True)
    secret.write_bytes((run / name).read_bytes())  # what it replaces, so only the link differs
    (run / name).unlink()
    (run / name).symlink_to(secret)
    assert _main("publish", str(run), "--to", str(tmp_path / "pub")) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"{run / name} is not a regular file: {run / name} is a symbolic link" in line
    assert not (tmp_path / "pub").exists()


def test_publish_follows_no_linked_folder_to_a_figure(tmp_path, checkout, capsys):
    run = _published_run(tmp_path, _clean(_git(checkout, "rev-parse", "HEAD")))
    (run / "report.md").write_text("# Run\n\n![loss](figures/loss.png)\n")
    (run / "real").mkdir()
    (run / "real" / "loss.png").write_bytes(b"png")
    (run / "figures").symlink_to(run / "real", target_is_directory=True)
    assert _main("publish", str(run), "--to", str(tmp_path / "pub")) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"{run / 'figures/loss.png'} is not a regular file: {run / 'figures'} is a" in line


def test_publish_writes_through_no_link_in_the_destination(tmp_path, checkout, capsys):
    """A report.md in --to that links elsewhere would be overwritten where it points."""
    run = _published_run(tmp_path, _clean(_git(checkout, "rev-parse", "HEAD")))
    target = tmp_path / "elsewhere.md"
    target.write_text("keep me")
    dest = tmp_path / "pub" / run.name  # where `publish RUN --to pub` writes
    dest.mkdir(parents=True)
    (dest / "report.md").symlink_to(target)
    assert _main("publish", str(run), "--to", str(tmp_path / "pub")) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"{dest / 'report.md'} is a symbolic link" in line
    assert target.read_text() == "keep me"


# -- interrupts ------------------------------------------------------------------------------


def test_a_sigint_during_the_last_epoch_reaches_the_caller(tmp_path, monkeypatch, capsys):
    # Was dropped: the flag was checked only before a next epoch, so the run (and an
    # experiment's next training) went on.
    def sigint_at_the_end(line: str) -> None:
        print(line, file=sys.stderr)
        if line.startswith("epoch 2/2"):  # the last epoch, after its last batch
            signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr("odebench.cli._log", sigint_at_the_end)
    out = tmp_path / "run"
    before = signal.getsignal(signal.SIGINT)  # SIG_IGN in a job started in the background
    assert _main(*TOY_ARGS, "--epochs", "2", "--out", str(out)) == 130
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last == f"SIGINT: stopped after the last epoch, 2; the run is complete in {out}"
    assert json.loads((out / "results.json").read_text())["epochs"] == 2  # whole and saved
    state = torch.load(out / "checkpoint.pt", weights_only=True)
    assert (state["epoch"], state["batch"]) == (2, 0)
    assert signal.getsignal(signal.SIGINT) is before  # restored
