"""``odebench list``, ``run`` and ``train`` on the command line: output and error paths."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import odebench
import pytest
from odebench import main
from odebench.experiments import EXPERIMENTS, RunOptions


def _run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    src = str(Path(odebench.__file__).resolve().parents[1])
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    env["OMP_NUM_THREADS"] = "1"
    cmd = [sys.executable, "-m", "odebench", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=600)


def test_list_names_experiments_models_and_data_sets(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in ("quickstart", "odenet", "resnet", "continuousnet", "mnist", "annuli-1d"):
        assert f"  {name} " in out, name


def test_list_shows_the_modes_of_every_experiment_with_their_seeds(capsys):
    assert main(["list"]) == 0
    modes = [line.strip() for line in capsys.readouterr().out.splitlines() if "modes:" in line]
    assert len(modes) == len(EXPERIMENTS)
    for line, experiment in zip(modes, EXPERIMENTS.values()):
        seeds = {m: experiment.modes[m] for m in ("quick", "standard", "full")}
        assert line == "modes: " + "; ".join(f"{m}: {s}" for m, s in seeds.items())
        assert int(seeds["standard"].split()[0]) >= 3, experiment.name


@pytest.mark.parametrize(
    ("flags", "mode"),
    [([], "standard"), (["--quick"], "quick"), (["--mode", "full"], "full"),
     (["--mode", "quick"], "quick")],
)  # fmt: skip
def test_run_picks_the_mode_standard_by_default(flags, mode, monkeypatch, tmp_path):
    seen = []
    monkeypatch.setattr(
        "odebench.experiments.run_experiment",
        lambda name, options, log: seen.append(options.mode_name),
    )
    assert main(["run", "quickstart", *flags, "--out", str(tmp_path / "q")]) == 0
    assert seen == [mode]


def test_run_refuses_quick_with_another_mode(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["run", "quickstart", "--quick", "--mode", "full"])
    assert exit_.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["run", "train"])
@pytest.mark.parametrize("device", ["bogus", "cuda:x"])
def test_a_bad_device_is_one_line_for_run_and_train(command, device, tmp_path, capsys):
    # `run` printed a 22-line traceback of torch.device's RuntimeError.
    train = ["--model", "mlp", "--dataset", "mnist"]
    what = ["quickstart", "--quick"] if command == "run" else train
    argv = [command, *what, "--device", device, "--out", str(tmp_path / "out")]
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(
        f"odebench {command}: error: argument --device: `device` must be 'auto', 'cpu', "
        f"'cuda' or 'cuda:N', got {device!r}."
    )
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("device", ["bogus", "cuda:x"])
def test_run_options_refuse_a_bad_device(device):
    with pytest.raises(ValueError, match=r"`device` must be 'auto', 'cpu', 'cuda' or 'cuda:N'"):
        RunOptions(out=Path("out"), device=device)


def test_download_fetches_into_the_data_dir_and_reports_where(tmp_path, monkeypatch, capsys):
    from odebench.data import _download

    monkeypatch.setattr(_download, "file_digest", lambda path, algorithm: "ok")
    monkeypatch.setattr(
        _download, "_RESOURCES",
        {"mnist": _download._Resource(("https://x/",), (("a.gz", "ok"), ("b.gz", "ok")))},
    )  # fmt: skip
    monkeypatch.setattr(_download, "_fetch", lambda url, dest: dest.write_bytes(url.encode()))
    assert main(["download", "mnist", "--data-dir", str(tmp_path)]) == 0
    assert (tmp_path / "mnist" / "b.gz").read_bytes() == b"https://x/b.gz"
    assert f"mnist is in {tmp_path / 'mnist'}" in capsys.readouterr().err


def test_download_failure_exits_2_with_the_attempts(tmp_path, monkeypatch, capsys):
    from odebench.data import _download

    def offline(url, dest):
        raise OSError("Name or service not known")

    monkeypatch.setattr(_download, "_fetch", offline)
    assert main(["download", "cifar10", "--data-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("odebench download: error: Could not download cifar-10-python")
    assert "Name or service not known" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["train", "--model", "nope", "--dataset", "mnist"], "Unknown `model` 'nope'"),
        (["train", "--model", "odenet", "--dataset", "mnist", "--epochs", "-3"],
         "argument --epochs: expected a non-negative integer, got -3"),
        (["train", "--model", "odenet", "--dataset", "mnist", "--data-dir", "/nonexistent/x"],
         "no mnist data in /nonexistent/x"),
        (["train", "--model", "odenet"], "the following arguments are required: --dataset"),
        (["train", "--model", "odenet", "--dataset", "mnist", "--lr", "-1"],
         "argument --lr: expected a positive number, got -1"),
        (["run", "nope"], "unknown experiment 'nope'; known: quickstart"),
        (["run", "quickstart", "--mode", "fast"], "argument --mode: invalid choice: 'fast'"),
        (["download", "imagenet"], "argument NAME: invalid choice: 'imagenet'"),
    ],
)  # fmt: skip
def test_bad_arguments_exit_2_with_one_line(args, message):
    proc = _run(*args)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert message in lines[0]
    assert "Traceback" not in proc.stderr


def test_an_existing_run_needs_resume(tmp_path):
    args = [
        "train", "--model", "toy-node", "--dataset", "annuli-1d", "--epochs", "1",
        "--train-size", "64", "--batch-size", "32", "--device", "cpu", "--no-progress",
        "--out", str(tmp_path / "run"),
    ]  # fmt: skip
    assert _run(*args).returncode == 0
    again = _run(*args)
    assert again.returncode == 2
    assert "holds a run already; pass --resume" in again.stderr
    resumed = _run(*args, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-2000:]


def test_a_diverging_run_stops_with_the_solver_message_and_no_traceback(tmp_path):
    args = [
        "train", "--model", "toy-node", "--dataset", "annuli-1d", "--lr", "1000",
        "--momentum", "0", "--batch-size", "64", "--epochs", "2", "--device", "cpu",
        "--no-progress", "--out", str(tmp_path / "run"),
    ]  # fmt: skip
    proc = _run(*args)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]  # after the line on what is trained
    assert last.startswith("odebench train: training failed: epoch 1, batch")
    assert "non-finite" in last and last.endswith("lower --lr.")


@pytest.mark.slow
def test_quickstart_quick_end_to_end(tmp_path):
    out = tmp_path / "quickstart"
    proc = _run("run", "quickstart", "--quick", "--device", "cpu", "--no-progress",
                "--out", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name in ("report.md", "results.json", "toy.png"):
        assert (out / name).exists(), name
    for run in ("node", "anode", "image"):
        assert (out / run / "results.json").exists(), run
    results = json.loads((out / "results.json").read_text())
    means = {run: {k: s["mean"] for k, s in m.items()} for run, m in results["metrics"].items()}
    node, anode = means["node"], means["anode"]
    assert node["nfe_forward"] > 0 and anode["nfe_forward"] > 0
    image = means["image"]
    assert 0.0 <= image["test_acc"] <= 1.0 and math.isfinite(image["test_loss"])
    report = (out / "report.md").read_text()
    assert "| NODE |" in report and "| ANODE |" in report and "![" in report


def test_report_combines_run_directories(tmp_path, capsys):
    dirs = []
    for name in ("alpha", "beta"):
        d = tmp_path / "runs" / name
        d.mkdir(parents=True)
        (d / "report.md").write_text(f"# {name} title\n\n| a |\n\n![fig](fig.png)\n")
        dirs.append(str(d))
    page = tmp_path / "site" / "page.md"
    assert main(["report", *dirs, "--out", str(page)]) == 0
    text = page.read_text()
    assert text.startswith("# Reproductions\n")
    assert "## alpha title" in text and "## beta title" in text
    assert "](../runs/alpha/fig.png)" in text and "](../runs/beta/fig.png)" in text
    # Only a figure's path moves: a link beside it kept its target only by chance before.
    (tmp_path / "runs" / "alpha" / "report.md").write_text(
        "![a](a.png) as in [Chen](https://x.org)\n"
    )
    assert main(["report", dirs[0], "--out", str(page)]) == 0
    assert "![a](../runs/alpha/a.png) as in [Chen](https://x.org)" in page.read_text()
    assert main(["report", str(tmp_path / "runs"), "--out", str(page)]) == 2
    assert "no report.md in" in capsys.readouterr().err
    # Was: a run's own report.md (or any file) replaced by the page without a word.
    own = tmp_path / "runs" / "beta" / "report.md"
    before = own.read_text()
    assert main(["report", *dirs, "--out", str(own)]) == 2
    assert "holds something other than a page of `odebench report`" in capsys.readouterr().err
    assert own.read_text() == before
    # Was: two sections under one anchor, the contents' second link leading to the first.
    twin = tmp_path / "more" / "alpha"
    twin.mkdir(parents=True)
    (twin / "report.md").write_text("# alpha again\n")
    assert main(["report", dirs[0], str(twin), "--out", str(page)]) == 2
    assert "two RUN_DIRs share a name" in capsys.readouterr().err
    # Was: a traceback ("Is a directory") after the page was made.
    assert main(["report", dirs[0], "--out", str(tmp_path / "site")]) == 2
    assert "is a folder; give the page's file" in capsys.readouterr().err
    (tmp_path / "file").write_text("")
    assert main(["report", dirs[0], "--out", str(tmp_path / "file" / "page.md")]) == 2
    assert f"cannot write --out {tmp_path / 'file' / 'page.md'}: " in capsys.readouterr().err


def test_run_all_runs_every_experiment_into_its_own_folder(monkeypatch, tmp_path, capsys):
    seen = []

    def run(name, options, log):
        seen.append((name, options.out, options.mode_name, options.bf16))
        if name == "pendulum":
            raise ValueError("pendulum went wrong")

    monkeypatch.setattr("odebench.experiments.run_experiment", run)
    code = main(["run", "all", "--mode", "full", "--bf16", "--out", str(tmp_path)])
    assert code == 1
    assert seen == [(name, tmp_path / name, "full", True) for name in EXPERIMENTS]
    err = capsys.readouterr().err
    assert "pendulum went wrong" in err and err.strip().endswith("failed: pendulum")


@pytest.mark.parametrize("how", ["status", "exception"])
def test_an_interrupt_stops_run_all_at_once(monkeypatch, tmp_path, capsys, how):
    # Each Ctrl-C ended only the current experiment and the loop started the next one.
    seen = []
    first, second, *rest = EXPERIMENTS

    def run_one(parser, args, name, out):
        seen.append(name)
        if name == second:
            if how == "exception":  # one that arrives outside the training's handling
                raise KeyboardInterrupt
            return 130
        return 1 if name == first else 0

    monkeypatch.setattr("odebench.cli._run_one", run_one)
    assert main(["run", "all", "--out", str(tmp_path)]) == 130
    assert seen == [first, second]
    line = capsys.readouterr().err.strip()
    assert line == (
        f"odebench run all: interrupted in {second}; not run: {', '.join(rest)}; failed: {first}"
    )


def test_an_interrupted_experiment_stops_run_all(monkeypatch, tmp_path, capsys):
    seen = []

    def run(name, options, log):
        seen.append(name)
        raise KeyboardInterrupt  # as an experiment's training does on Ctrl-C

    monkeypatch.setattr("odebench.experiments.run_experiment", run)
    assert main(["run", "all", "--quick", "--out", str(tmp_path)]) == 130
    assert seen == [next(iter(EXPERIMENTS))]
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith(f"odebench run all: interrupted in {seen[0]}; not run: ")
