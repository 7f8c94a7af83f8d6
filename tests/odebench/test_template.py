"""The experiment template: settings per mode, runs per seed, aggregation, claims, report."""

from __future__ import annotations

import dataclasses
import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from odebench.experiments import (
    EXPERIMENTS,
    Claim,
    Figure,
    Measurement,
    Metric,
    Ref,
    Result,
    Run,
    RunOptions,
    Settings,
    Setup,
    Stat,
    Template,
    Trained,
    Values,
    _runner,
    register_template,
    run_experiment,
)
from odebench.experiments._registry import _REGISTRY, command
from odebench.training import Task, TrainConfig
from torch import nn


def _m(run: str, metric: str) -> Ref:
    """The metric named ``metric`` of ``run``."""
    return Metric(metric).of(run)


@dataclass(frozen=True)
class Tiny(Settings):
    epochs: int
    train_size: int


MODES = {
    "quick": Tiny(epochs=1, train_size=64, seeds=2),
    "standard": Tiny(epochs=2, train_size=96),
    "full": Tiny(epochs=3, train_size=128, seeds=3),
}


def _runs(setup: Setup[Tiny], seed: int) -> list[Run]:
    s = setup.settings
    config = TrainConfig(
        model="toy-node", dataset="annuli-1d", epochs=s.epochs, batch_size=32,
        optimizer="adam", lr=1e-2, train_size=s.train_size, test_size=64, seed=seed,
    )  # fmt: skip
    return [Run("node", config=config), Run("line", task=_line(seed))]


def _line(seed: int) -> Task:
    """An experiment's own task: a seeded linear map, trained for no epoch."""
    x = torch.zeros(4, 1)
    return Task(
        model=lambda: nn.Linear(1, 1),
        data=(x, x),
        loss=lambda net, batch: nn.functional.mse_loss(net(batch[0]), batch[1]),
        optimizer=torch.optim.SGD,
        epochs=0, batch_size=4, seed=seed, settings={"seed": seed},
    )  # fmt: skip


def _measure(setup: Setup[Tiny], trained: Trained) -> Measurement:
    if trained.run.name == "line":
        weight = float(trained.load().weight.item())
        return Measurement({"weight": weight, "seed": float(trained.seed)}, {"rows": 1})
    return Measurement(trained.final_metrics())


CLAIMS = [
    Claim(
        key="seed_is_zero",
        text="the seed is zero",
        published=0.0,
        ours=lambda v: v[_m("line", "seed")],
        holds=lambda v: v[_m("line", "seed")] < 0.75,
        kind="paper",
        detail="ours: the mean seed",
    ),
    Claim(
        key="node_fits",
        text="the NODE's test MSE is finite",
        published="finite",
        ours=lambda v: v[_m("node", "test_loss")],
        holds=lambda v: v[_m("node", "test_loss")] < 1e9,
        kind="check",
    ),
]


def _draw(result: Result[Tiny], path: Path) -> None:
    path.write_text(f"{len(result.metrics)} runs")


TEMPLATE = Template(
    name="tiny-template",
    description="a test experiment",
    title="Tiny",
    modes=MODES,
    runs=_runs,
    measure=_measure,
    claims=lambda setup: CLAIMS,
    text=str(Path(__file__).with_name("tiny-template.md")),  # "## Mine", then {weight}
    words=lambda result: {"weight": result.cell(Metric("weight", spec=".3f").of("line"))},
    figures=[Figure("drawn.txt", _draw)],
)


@pytest.fixture
def registered():
    register_template(TEMPLATE)
    yield TEMPLATE.name
    del _REGISTRY[TEMPLATE.name]


@pytest.fixture
def quick(tmp_path: Path, registered: str) -> tuple[Path, dict[str, Any]]:
    out = tmp_path / "tiny"
    options = RunOptions(out=out, quick=True, device="cpu", progress=False)
    return out, run_experiment(registered, options, log=lambda _: None)


def test_the_record_lists_the_modes_with_their_seeds(registered: str) -> None:
    assert EXPERIMENTS[registered].modes == {
        "quick": "2 seeds", "standard": "1 seed", "full": "3 seeds"
    }  # fmt: skip
    for experiment in EXPERIMENTS.values():
        assert list(experiment.modes) == ["quick", "standard", "full"], experiment.name


def test_every_run_of_every_seed_in_its_folder(quick: tuple[Path, dict[str, Any]]) -> None:
    out, result = quick
    assert result["seeds"] == [0, 1]
    assert (out / "node" / "seed0" / "checkpoint.pt").exists()
    assert (out / "node" / "seed1" / "checkpoint.pt").exists()
    assert json.loads((out / "results.json").read_text()) == result
    assert (out / "drawn.txt").read_text() == "2 runs"


def test_mean_and_sample_std_over_seeds(quick: tuple[Path, dict[str, Any]]) -> None:
    _, result = quick
    weight = result["metrics"]["line"]["weight"]
    assert weight["n"] == 2 and len(weight["seeds"]) == 2
    assert weight["mean"] == pytest.approx(statistics.fmean(weight["seeds"]))
    assert weight["std"] == pytest.approx(statistics.stdev(weight["seeds"]))
    assert result["details"] == {"line": [{"rows": 1}, {"rows": 1}]}
    assert result["settings"] == {"seeds": 2, "epochs": 1, "train_size": 64}


def test_a_claim_holds_on_the_mean_and_the_report_names_the_seeds(
    quick: tuple[Path, dict[str, Any]],
) -> None:
    out, result = quick
    claim = result["claims"]["seed_is_zero"]
    assert claim["holds"] and claim["held_on_seeds"] == [True, False]  # mean seed 0.5
    assert claim["ours"]["mean"] == 0.5 and claim["ours"]["std"] == pytest.approx(0.7071, 1e-3)
    report = (out / "report.md").read_text()
    assert report.startswith("# Tiny\n\n`odebench run tiny-template --quick`, ")
    assert "mode quick, seeds 0, 1, " in report
    assert "| claim | published | ours (mean ± std, n seeds) | verdict |" in report
    # Held on the mean but on only one of two seeds: not "held".
    assert (
        "| **the seed is zero**: ours: the mean seed | 0 | 0.5 ± 0.707 (2 seeds) | mixed: held "
        "on 1 of 2 seeds |" in report
    )
    papers, checks = report.split("## Claims of the paper")[1].split("## Checks of our code")
    assert "the seed is zero" in papers and "test MSE" not in papers
    assert "| **the NODE's test MSE is finite** | finite |" in checks
    assert "| passed |" in checks
    assert report.endswith("## Mine\n\nweight " + Stat.of(
        result["metrics"]["line"]["weight"]["seeds"]).cell(".3f") + "\n")  # fmt: skip


def test_resume_continues_every_run_with_the_same_numbers(
    quick: tuple[Path, dict[str, Any]], registered: str
) -> None:
    out, first = quick
    options = RunOptions(out=out, quick=True, device="cpu", progress=False, resume=True)
    again = run_experiment(registered, options, log=lambda _: None)
    assert again["metrics"] == first["metrics"]
    header = (out / "report.md").read_text().splitlines()[2]
    assert header.endswith(
        f"(resumed: {again['train_seconds']:.0f} s of training over every run and seed)."
    )


def test_one_seed_trains_into_the_run_folder_and_shows_no_spread(
    tmp_path: Path, registered: str
) -> None:
    out = tmp_path / "standard"
    result = run_experiment(registered, RunOptions(out=out, device="cpu", progress=False))
    assert result["mode"] == "standard" and result["command"] == "odebench run tiny-template"
    assert (out / "node" / "checkpoint.pt").exists()
    assert result["metrics"]["node"]["epochs"] == {"mean": 2.0, "std": None, "n": 1,
                                                  "seeds": [2.0]}  # fmt: skip
    assert (
        "| **the seed is zero**: ours: the mean seed | 0 | 0 (1 seed) | held |"
        in (out / "report.md").read_text()
    )


def test_epochs_set_every_epoch_field() -> None:
    assert TEMPLATE.settings_for("quick", epochs=5) == Tiny(epochs=5, train_size=64, seeds=2)


def test_results_record_the_training_time_and_the_data(
    quick: tuple[Path, dict[str, Any]],
) -> None:
    out, result = quick
    seconds = [
        json.loads((out / "node" / f"seed{k}" / "results.json").read_text())["train_seconds"]
        for k in (0, 1)
    ]
    assert result["train_seconds"] >= sum(seconds) > 0  # and the fit runs' time
    assert result["data"] == "annuli-1d (64 train / 64 test)"
    claim = result["claims"]["seed_is_zero"]
    assert claim["cell"] == "0.5 ± 0.707"
    assert claim["verdict"] == "mixed: held on 1 of 2 seeds"
    assert claim["status"] == "mixed" and claim["kind"] == "paper"
    assert result["claims"]["node_fits"]["kind"] == "check"
    assert result["claims"]["node_fits"]["status"] == "passed"


def test_bf16_reaches_every_configured_run(tmp_path: Path, registered: str) -> None:
    options = RunOptions(out=tmp_path / "b", quick=True, device="cpu", progress=False, bf16=True)
    result = run_experiment(registered, options, log=lambda _: None)
    config = json.loads((tmp_path / "b" / "node" / "seed0" / "config.json").read_text())
    assert config["config"]["bf16"] is True
    assert result["command"] == "odebench run tiny-template --quick --bf16"


def test_bf16_autocasts_the_loss_of_a_runs_own_task() -> None:
    seen = []

    def loss(net: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        out = net(batch[0])
        seen.append(out.dtype)
        return out.float().square().mean()

    task = dataclasses.replace(_line(0), loss=loss)
    net, batch = nn.Linear(1, 1), (torch.ones(4, 1), torch.ones(4, 1))
    cast = _runner._bf16(task)
    cast.loss(net, batch)
    task.loss(net, batch)
    assert seen == [torch.bfloat16, torch.float32]
    # its settings say so: a resume with or without the flag compares them
    assert cast.settings == {**task.settings, "bf16": True}


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"mode": "fast"}, "tiny-template has no mode 'fast'; its modes: quick, standard, full."),
        ({"quick": True, "mode": "full"}, "`quick` runs the mode 'quick'"),
    ],
)
def test_an_unknown_mode_lists_the_known_ones(
    tmp_path: Path, registered: str, options: dict[str, Any], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        run_experiment(registered, RunOptions(out=tmp_path / "x", **options))


@pytest.mark.parametrize(
    ("modes", "named"),
    [
        (["quick", "full"], "quick, full"),
        (["quick", "standard", "full", "huge"], "quick, standard, full, huge"),
    ],
)
def test_every_experiment_declares_exactly_the_three_modes(modes: list[str], named: str) -> None:
    with pytest.raises(ValueError, match=f"`modes` has {named}.*give exactly quick, standard"):
        Template(name="t", description="", title="", runs=_runs, measure=_measure,
                 modes={m: MODES.get(m, MODES["full"]) for m in modes})  # fmt: skip


def test_the_command_names_the_mode_unless_it_is_the_default(tmp_path: Path) -> None:
    assert RunOptions(out=tmp_path).mode_name == "standard"
    assert command("t", RunOptions(out=tmp_path)) == "odebench run t"
    assert command("t", RunOptions(out=tmp_path, mode="full")) == "odebench run t --mode full"
    assert command("t", RunOptions(out=tmp_path, quick=True)) == "odebench run t --quick"


@pytest.mark.parametrize(
    ("name", "text", "read"),
    [
        ("pendulum", None, "pendulum.md"),  # text/pendulum.md exists
        ("no-such-experiment", None, ""),
        ("pendulum", "", ""),
        ("pendulum", "quickstart.md", "quickstart.md"),
    ],
)
def test_the_text_defaults_to_the_file_named_after_the_experiment(
    name: str, text: str | None, read: str
) -> None:
    template = Template(name=name, description="", title="", modes=MODES, runs=_runs,
                        measure=_measure, text=text)  # fmt: skip
    assert template.text == read


def test_declaration_errors_are_clear() -> None:
    with pytest.raises(ValueError, match=r"`epoch_fields` \['steps'\] are not fields"):
        Template(name="t", description="", title="", modes=MODES, runs=_runs,
                 measure=_measure, epoch_fields=("steps",))  # fmt: skip
    with pytest.raises(ValueError, match="--epochs does not apply to t"):
        Template(name="t", description="", title="", modes=MODES, runs=_runs,
                 measure=_measure, epoch_fields=()).settings_for("quick", 3)  # fmt: skip
    with pytest.raises(ValueError, match="give exactly one of `config`, `task` and `skipped`"):
        Run("node")
    with pytest.raises(ValueError, match="`seeds` must be a positive integer, got 0"):
        Tiny(epochs=1, train_size=1, seeds=0)


def test_settings_check_fields_annotated_by_the_types_themselves() -> None:
    """A subclass in a module without postponed annotations has ``int`` itself, not the
    text ``"int"``, as its fields' types: their checks were skipped, and ``epochs=0``
    or ``2.5`` accepted."""
    fields = [("epochs", int), ("size", int | None, dataclasses.field(default=None))]
    plain = dataclasses.make_dataclass(
        "Plain", fields, bases=(Settings,), frozen=True, kw_only=True
    )
    for kwargs, name in (({"epochs": 0}, "epochs"), ({"epochs": 2.5}, "epochs"),
                         ({"epochs": 1, "size": 0}, "size")):  # fmt: skip
        with pytest.raises(ValueError, match=f"`{name}` must be a positive integer"):
            plain(**kwargs)
    assert plain(epochs=2).size is None


def test_a_claim_that_names_an_unknown_metric_says_which() -> None:
    claim = Claim(key="k", text="", published="", ours=lambda v: v[_m("a", "nope")],
                  holds=lambda v: True, kind="paper")  # fmt: skip
    with pytest.raises(KeyError, match="claim 'k': no metric 'nope' of run 'a'"):
        claim.check([Values({"a": {"x": 1.0}}, "seed 0")])


@pytest.mark.parametrize(
    ("values", "cell"),
    [([1.0, 2.0, 3.0], "2 ± 1"), ([4.0], "4"), ([None, float("nan")], "–"), ([2.0, None], "2")],
)
def test_stat_cells(values: list[float | None], cell: str) -> None:
    assert Stat.of(values).cell(".3g") == cell


def test_ours_shows_the_number_the_verdict_is_judged_on() -> None:
    """A claim on a maximum: the mean of the per-seed gaps (-5) is not the gap of the
    means (0, the verdict's); the table shows the latter, with the seeds' spread."""
    claim = Claim(
        key="best", text="", published="",
        ours=lambda v: v[_m("il", "acc")] - max(v[_m("il", "acc")], v[_m("so", "acc")]),
        holds=lambda v: v[_m("il", "acc")] >= max(v[_m("il", "acc")], v[_m("so", "acc")]) - 1,
        kind="paper",
    )  # fmt: skip
    seeds = [Values({"il": {"acc": 80.0}, "so": {"acc": 70.0}}, "seed 0"),
             Values({"il": {"acc": 60.0}, "so": {"acc": 70.0}}, "seed 1")]  # fmt: skip
    verdict = claim.check(seeds)
    assert verdict.holds and verdict.held_on == (True, False)
    assert verdict.ours.mean == 0.0 and verdict.ours.values == (0.0, -10.0)
    assert verdict.ours.std == pytest.approx(statistics.stdev([0.0, -10.0]))


def _flag(key: str = "k", *, kind: str = "paper", timing: bool = False) -> Claim:
    """A claim that holds where the metric ``ok`` is 1."""
    return Claim(key=key, text="ok", published="", ours=lambda v: v[_m("r", "ok")],
                 holds=lambda v: v[_m("r", "ok")] > 0.5, kind=kind, timing=timing)  # type: ignore[arg-type]  # fmt: skip


def _seeds(*oks: float) -> list[Values]:
    return [Values({"r": {"ok": ok}}, f"seed {k}") for k, ok in enumerate(oks)]


@pytest.mark.parametrize(
    ("oks", "status", "words"),
    [
        ((1, 1, 1), "held", "held on 3 of 3 seeds"),
        ((1, 1, 0), "held", "held on 2 of 3 seeds"),  # mean 0.67 > 0.5, most seeds
        ((1, 1, 0.4, 0), "mixed", "mixed: held on 2 of 4 seeds"),  # mean 0.6, half the seeds
        ((1, 0.9, 0, 0), "mixed", "mixed: held on 2 of 4 seeds, not on the mean"),  # 0.475
        ((1, 0.8, 0, 0, 0), "mixed", "mixed: held on 2 of 5 seeds, not on the mean"),
        ((1, 1, 0, 0, 0), "mixed", "mixed: held on 2 of 5 seeds, not on the mean"),
        ((1, 0, 0), "mixed", "mixed: held on 1 of 3 seeds, not on the mean"),
        ((0, 0, 0), "not held", "not held"),
        ((1,), "held", "held"),
        ((0,), "not held", "not held"),
    ],
)
def test_a_paper_claim_holds_only_on_the_mean_and_on_most_seeds(
    oks: tuple[float, ...], status: str, words: str
) -> None:
    verdict = _flag().check(_seeds(*oks))
    assert (verdict.status, verdict.words) == (status, words)
    assert verdict.to_json()["status"] == status and verdict.to_json()["kind"] == "paper"


def test_a_claim_on_the_mean_alone_is_mixed_not_held() -> None:
    """The mean of (3, 0, 0) passes a threshold that two of three seeds miss."""
    claim = Claim(key="k", text="big", published="", ours=lambda v: v[_m("r", "x")],
                  holds=lambda v: v[_m("r", "x")] > 0.9, kind="paper")  # fmt: skip
    verdict = claim.check([Values({"r": {"x": x}}) for x in (3.0, 0.0, 0.0)])
    assert verdict.holds and verdict.status == "mixed"


@pytest.mark.parametrize(
    ("oks", "status", "words"),
    [((1, 1, 1), "passed", "passed"), ((1, 1, 0), "failed", "failed on 1 of 3 seeds"),
     ((0,), "failed", "failed")],
)  # fmt: skip
def test_a_check_passes_only_on_every_seed(oks: tuple[float, ...], status: str, words: str) -> None:
    verdict = _flag(kind="check").check(_seeds(*oks))
    assert (verdict.status, verdict.words) == (status, words)


def test_a_check_that_fails_on_the_mean_alone_says_so() -> None:
    """Ratios 1 and -1.1 below 2 on the seeds, 20 on the means (1 over 0.05): before, the
    check "failed on 0 of 2 seeds"."""
    claim = Claim.ratio("k", "t", "", _m("a", "x"), _m("b", "x"), below=2.0, kind="check")
    verdict = claim.check([Values({"a": {"x": 1.0}, "b": {"x": b}}) for b in (1.0, -0.9)])
    assert verdict.held_on == (True, True) and not verdict.holds
    assert (verdict.status, verdict.words) == ("failed", "failed on the mean")


def test_a_timing_claim_on_a_contended_machine_is_not_judged() -> None:
    held = _flag(timing=True).check(_seeds(1, 1, 1), contended=True)
    assert held.status == "contended" and held.words == "contended: not judged"
    # Only timing claims: the same contended run still judges the others.
    assert _flag().check(_seeds(1, 1, 1), contended=True).status == "held"
    assert _flag(timing=True).check(_seeds(1, 1, 1)).status == "held"


def test_claims_declare_a_kind_and_a_short_text() -> None:
    with pytest.raises(TypeError, match="kind"):
        Claim(key="k", text="t", published="", ours=lambda v: 0.0, holds=lambda v: True)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="`kind` must be one of paper, check, got 'papers'"):
        _flag(kind="papers")
    with pytest.raises(ValueError, match=r"`text` has 91 characters, at most 90 .* `detail`"):
        Claim(key="k", text="x" * 91, published="", ours=lambda v: 0.0,
              holds=lambda v: True, kind="paper")  # fmt: skip
    with pytest.raises(ValueError, match="a timing claim is a claim of the paper"):
        _flag(kind="check", timing=True)
    with pytest.raises(ValueError, match="give `above`, `below` or both"):
        Claim.difference("d", "t", "", _m("a", "x"), _m("b", "x"), kind="paper")


def test_a_difference_is_paired_per_seed() -> None:
    """Two models whose accuracies move together over seeds: the unpaired spread (10
    points) hides a difference that is +1 point on every seed."""
    claim = Claim.difference("d", "a beats b", "", _m("a", "acc"), _m("b", "acc"), above=0.0,
                             kind="paper", scale=100)  # fmt: skip
    seeds = [Values({"a": {"acc": b + 0.01}, "b": {"acc": b}}) for b in (0.7, 0.8, 0.9)]
    verdict = claim.check(seeds)
    assert verdict.ours.values == pytest.approx((0.01, 0.01, 0.01))
    assert verdict.ours.std == pytest.approx(0.0, abs=1e-12)
    assert verdict.status == "held" and verdict.ours.cell(*claim.format) == "+1.00 ± 0.00"
    below = Claim.difference(
        "d", "a", "", _m("a", "acc"), _m("b", "acc"), below=0.005, kind="paper"
    )
    assert below.check(seeds).status == "not held"


def test_results_carry_their_provenance(quick: tuple[Path, dict[str, Any]]) -> None:
    import subprocess

    from odebench._provenance import repository

    out, result = quick
    prov = result["provenance"]
    top = repository()
    assert top is not None  # the tests run from a checkout
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=top, capture_output=True,
                          text=True, check=True).stdout.strip()  # fmt: skip
    assert prov["commit"] == head and isinstance(prov["dirty"], bool)
    assert prov["versions"]["torch"] == torch.__version__
    assert set(prov["versions"]) == {"python", "torch", "numpy", "odecore", "odelayers",
                                     "contnet", "odebench"}  # fmt: skip
    assert prov["threads"] >= 1 and prov["cores"] >= 1 and prov["cpu"]
    assert prov["device"] == "cpu" and prov["resumed"] is False
    assert set(prov["load"]) == {"before", "after", "max", "mean"}
    assert prov["started"] <= prov["finished"]
    assert prov["contended"] is (prov["load"]["max"] >= min(prov["threads"], prov["cores"]) + 0.5)
    assert f"Commit {head[:10]}" in (out / "report.md").read_text()


def test_the_load_is_sampled_while_the_run_trains(monkeypatch: pytest.MonkeyPatch) -> None:
    """A busy minute in the middle of a run marks it contended, though it began and
    ended idle."""
    import time

    from odebench import _provenance

    loads = iter([0.1, 3.0, 3.0, 3.0] + [0.1] * 1000)
    monkeypatch.setattr(_provenance, "load_average", lambda: next(loads))
    started = _provenance.provenance_started(sample_every=0.01)
    time.sleep(0.2)
    prov = started.finish(threads=1)
    assert prov.load["before"] == 0.1 and prov.load["after"] == 0.1
    assert prov.load["max"] == 3.0 and prov.contended
    monkeypatch.setattr(_provenance, "load_average", lambda: 2.4)  # two threads, busy alone
    quiet = _provenance.provenance_started(sample_every=3600).finish(threads=2)
    assert quiet.cores < 2 or not quiet.contended


def test_the_report_names_the_device_the_runs_trained_on() -> None:
    """A run on a GPU said only "1 thread on 16 × <its CPU>", as if its times were the CPU's."""
    from odebench._provenance import Provenance
    from odebench.experiments._report import _provenance_lines

    def line(device: str) -> str:
        return _provenance_lines(Provenance("0" * 40, False, None, {}, 1, "Xeon", 16, device, ""))[
            0
        ]

    assert "1 thread on 16 × Xeon, trained on cuda:0 (NVIDIA H100); load" in line(
        "cuda:0 (NVIDIA H100)"
    )
    assert "1 thread on 16 × Xeon; load" in line("cpu")
