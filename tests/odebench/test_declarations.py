"""Every experiment's declaration holds before any training: claims and tables read runs
that exist, metrics are read at the coordinates they are measured over, and the text
of a report details exactly the claims that need it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from odebench.experiments import (
    MODES,
    TEMPLATES,
    Claim,
    Col,
    Metric,
    Row,
    Table,
    Template,
    Values,
    check_declaration,
)
from odebench.experiments._report import Prose


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_every_declared_experiment_reads_only_what_it_declares(name: str, mode: str) -> None:
    try:
        check_declaration(TEMPLATES[name], mode)
    except FileNotFoundError as exc:  # a mode whose runs look for a data set not here
        pytest.skip(str(exc))


def test_a_metric_read_at_the_wrong_coordinates_fails_where_it_is_written() -> None:
    error = Metric("test_error", over=("tol",))
    assert error.of("relu", tol=1e-3).key == "test_error@0.001"
    with pytest.raises(ValueError, match=r"measured over \(tol\), got \(rtol\)"):
        error.of("relu", rtol=1e-3)
    saved = Metric(
        "saved_mib", over=("gradient", "steps"), key_format="saved_mib_{gradient}@{steps}"
    )
    assert saved.key(gradient="adjoint", steps=4) == "saved_mib_adjoint@4"
    with pytest.raises(ValueError, match="may use only"):
        Metric("x", over=("tol",), key_format="{name}@{rtol}")


@pytest.mark.parametrize(
    ("a", "b"), [(1e-6, 1.0000001e-6), (0.1, 0.10000001), (1234567, 1234568), (2**60, 2**60 + 1)]
)
def test_two_numbers_that_g_writes_alike_get_two_keys(a: float, b: float) -> None:
    error = Metric("test_error", over=("tol",))
    assert error.key(tol=a) != error.key(tol=b)
    assert float(error.key(tol=a).partition("@")[2]) == a  # and each reads back as itself


@pytest.mark.parametrize(("tol", "key"), [(1e-5, "1e-05"), (0.125, "0.125"), (1.0, "1"), (8, "8")])
def test_the_keys_of_published_results_are_unchanged(tol: float, key: str) -> None:
    assert Metric("e", over=("tol",)).key(tol=tol) == f"e@{key}"


def test_a_claim_on_an_unknown_run_fails_its_dry_run() -> None:
    acc = Metric("test_acc")
    claim = Claim("fits", "fits", "1", ours=lambda v: v[acc.of("nod")],
                  holds=lambda v: v[acc.of("nod")] > 0.5, kind="paper")  # fmt: skip
    with pytest.raises(KeyError, match="no run 'nod'"):
        claim.check([Values.dry_run(["node", "anode"])])
    claim.check([Values.dry_run(["nod"])])
    assert Values.dry_run(["nod"])[acc.of("nod")] != Values.dry_run(["nod"])[acc.of("nod")]


def _template(
    tmp_path: Path, text: str, claims: list[Claim], tables: dict[str, Table]
) -> tuple[Template[Any], Path]:
    from odebench.experiments import Measurement, Run, Settings
    from odebench.training import TrainConfig

    tmp_path.mkdir()
    file = tmp_path / "text.md"
    file.write_text(text)
    config = TrainConfig(model="toy-node", dataset="annuli-1d", epochs=1)
    return Template(
        name="t", description="t", title="t",
        modes={m: Settings() for m in MODES},
        runs=lambda setup, seed: [Run("node", config=config)],
        measure=lambda setup, trained: Measurement({}),
        claims=lambda setup: claims, tables=lambda setup: tables, text=str(file),
        epoch_fields=(),
    ), file  # fmt: skip


def test_the_text_must_detail_exactly_the_claims_without_details(tmp_path: Path) -> None:
    acc = Metric("test_acc")
    bare = Claim("fits", "fits", "1", ours=lambda v: v[acc.of("node")],
                 holds=lambda v: True, kind="paper")  # fmt: skip
    table = Table("model", [Row("NODE", "node")], [Col("accuracy", acc)])
    text = "{table[main]}\n<!-- claims -->\nfits: ours\n{s.seeds}\n"
    good, file = _template(tmp_path / "good", text, [bare], {"main": table})
    check_declaration(good, "quick")
    assert Prose.of(str(file)).details == {"fits": "ours {s.seeds}"}
    no_details, _ = _template(tmp_path / "bare", "{table[main]}\n", [bare], {"main": table})
    with pytest.raises(ValueError, match=r"\['fits'\] have none"):
        check_declaration(no_details, "quick")
    no_table, _ = _template(tmp_path / "table", "{table[other]}\n", [], {"main": table})
    with pytest.raises(ValueError, match=r"no table \['other'\] is declared"):
        check_declaration(no_table, "quick")
    elsewhere = Table("model", [Row("NODE", "anode")], [Col("accuracy", acc)])
    wrong_run, _ = _template(tmp_path / "run", "", [], {"main": elsewhere})
    with pytest.raises(KeyError, match="unknown run 'anode'"):
        check_declaration(wrong_run, "quick")


def test_a_paragraph_of_details_without_a_key_is_refused(tmp_path: Path) -> None:
    file = tmp_path / "text.md"
    file.write_text("report\n<!-- claims -->\nno key here\n")
    with pytest.raises(ValueError, match="each paragraph is `key: details`"):
        Prose.of(str(file))
    shared = tmp_path / "shared.md"
    shared.write_text("report\n<!-- claims -->\na, b: one detail\nfor two\n\nc: another\n")
    assert Prose.of(str(shared)).details == {"a": "one detail for two", "b": "one detail for two",
                                             "c": "another"}  # fmt: skip


def test_a_table_shows_a_row_s_text_before_the_column_s_metric() -> None:
    from odebench.experiments import Measurement, Result, RunOptions, Settings, Setup, Stat

    acc = Metric("test_acc", spec=".1f", scale=100, unit="%")
    setup = Setup("t", "quick", Settings(), RunOptions(out=Path("unused")), (0, 1), print)
    stats = {"node": {"test_acc": Stat.of([0.5, 0.7])}}
    result = Result(setup, "", "", 0.0, stats, {"node": (Measurement({}),) * 2}, ())
    table = Table(
        "model",
        [Row("NODE", "node", text={"paper": "61.0%"}), Row("published", text={"ours": "n/a"})],
        [Col("ours", acc), Col("paper")],
    )
    assert table.render(result) == [
        ["model", "ours", "paper"],
        ["NODE", "60.0 ± 14.1%", "61.0%"],
        ["published", "n/a", "–"],
    ]
    assert [v[acc.of("node")] for v in result.per_seed()] == [0.5, 0.7]


def test_the_parts_of_a_text_are_filled_in_by_name(tmp_path: Path) -> None:
    file = tmp_path / "parts.md"
    file.write_text(
        "Report {s.seeds}.\n<!-- part: found -->\n## {label}\n\n<!-- part: skipped -->\n"
        "{label}: skipped.\n<!-- claims -->\na: details\n"
    )
    prose = Prose.of(str(file))
    assert prose.report == "Report {s.seeds}.\n"
    assert prose.part("found", label="MNIST") == "## MNIST"
    assert prose.part("skipped", label="SVHN") == "SVHN: skipped."
    assert prose.details == {"a": "details"}
    with pytest.raises(KeyError, match="no part 'trained' in the text; its parts: found, skipped"):
        prose.part("trained")


def test_a_text_reads_a_claim_s_bounds_as_its_numbers_are_shown(tmp_path: Path) -> None:
    from odebench.experiments import Measurement, Result, RunOptions, Settings, Setup, Stat
    from odebench.experiments._report import namespace

    acc = Metric("test_acc", spec=".1f", scale=100, unit="%")
    node, anode = acc.of("node"), acc.of("anode")
    claims = [
        Claim.at_least("fits", "fits", 0.9, node, 0.95, kind="paper"),
        Claim.difference("close", "close", "x", node, anode, below=-0.01, above=-0.2,
                         kind="paper", scale=100, unit=" points"),
        Claim("bare", "bare", "x", ours=lambda v: v[node], holds=lambda v: v[node] > 0.5,
              kind="check"),
    ]  # fmt: skip
    template, _ = _template(tmp_path / "t", "", claims, {})
    setup = Setup("t", "quick", Settings(), RunOptions(out=Path("unused")), (0,), print)
    stats = {run: {"test_acc": Stat.of([0.96])} for run in ("node", "anode")}
    result = Result(setup, "", "", 0.0, stats, {"node": (Measurement({}),)}, ())
    fields = namespace(template, result)
    text = "at {claim[fits].low:.1f}%; from {claim[close].low:g} to {claim[close].high:g} points"
    assert text.format_map(fields) == "at 95.0%; from -20 to -1 points"
    for missing in ("{claim[fits].high}", "{claim[bare].low}"):  # no bound: no `None` shown
        with pytest.raises(AttributeError):
            missing.format_map(fields)
    with pytest.raises(KeyError):
        "{claim[unknown].low}".format_map(fields)
