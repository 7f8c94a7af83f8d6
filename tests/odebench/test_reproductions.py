"""``publish`` and the committed results that the docs' Reproductions pages include."""

from __future__ import annotations

import functools
import json
import re
import subprocess
from pathlib import Path

import pytest
from odebench._provenance import repository
from odebench.cli import main
from odebench.experiments import EXPERIMENTS, publish

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results"
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")


@functools.cache
def _clean_provenance() -> dict[str, object]:
    """A provenance that publish takes: the checkout's HEAD, from a clean tree."""
    top = repository()
    assert top is not None, "publish checks a run's commit against the git checkout"
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=top, capture_output=True, text=True)
    return {"commit": head.stdout.strip(), "dirty": False}


def _run_dir(path: Path, links: tuple[str, ...] = ("loss.png", "sub/curves.png")) -> Path:
    """A fake run directory: a report showing ``links``, results, and heavy files."""
    path.mkdir(parents=True)
    body = "\n".join(f"![figure]({link})" for link in links)
    (path / "report.md").write_text(f"# Run\n\n{body}\n")
    results = {"experiment": "fake", "provenance": _clean_provenance()}
    (path / "results.json").write_text(json.dumps(results))
    for link in links:
        (path / link).parent.mkdir(parents=True, exist_ok=True)
        (path / link).write_bytes(link.encode())
    (path / "checkpoint.pt").write_bytes(b"weights")
    (path / "sub" / "metrics.csv").parent.mkdir(exist_ok=True)
    (path / "sub" / "metrics.csv").write_text("epoch\n0\n")
    return path


def _strings(value: object) -> list[str]:
    """Every string in a JSON value."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return []


def _tree(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*") if p.is_file()}


def test_publish_copies_the_report_and_what_it_shows_only(tmp_path):
    run = _run_dir(tmp_path / "run")
    files = publish(run, tmp_path / "pub")
    assert [str(f) for f in files] == ["report.md", "results.json", "loss.png", "sub/curves.png"]
    assert _tree(tmp_path / "pub") == {str(f) for f in files}
    assert (tmp_path / "pub" / "sub" / "curves.png").read_bytes() == b"sub/curves.png"


def test_republishing_drops_figures_the_new_report_no_longer_shows(tmp_path):
    publish(_run_dir(tmp_path / "old"), tmp_path / "pub")
    publish(_run_dir(tmp_path / "new", links=("nfe.png",)), tmp_path / "pub")
    assert _tree(tmp_path / "pub") == {"report.md", "results.json", "nfe.png"}


def test_publish_refuses_a_foreign_directory_and_leaves_it_alone(tmp_path):
    dest = tmp_path / "mine"
    dest.mkdir()
    (dest / "notes.txt").write_text("keep")
    with pytest.raises(ValueError, match=r"holds no published report\.md"):
        publish(_run_dir(tmp_path / "run"), dest)
    assert _tree(dest) == {"notes.txt"}


def test_unpublishing_never_deletes_outside_the_destination(tmp_path):
    dest = tmp_path / "pub"
    publish(_run_dir(tmp_path / "run"), dest)
    outside = tmp_path / "precious.png"
    outside.write_bytes(b"keep")
    (dest / "report.md").write_text("# Edited\n\n![x](../precious.png)\n")
    publish(_run_dir(tmp_path / "run2", links=("a.png",)), dest)
    assert outside.read_bytes() == b"keep"


@pytest.mark.parametrize(
    ("links", "error", "match"),
    [
        (("../escape.png",), ValueError, "outside"),
        (("missing.png",), FileNotFoundError, "missing"),
    ],
)
def test_publish_rejects_bad_links(tmp_path, links, error, match):
    run = _run_dir(tmp_path / "run", links=())
    (run / "report.md").write_text("".join(f"![x]({link})\n" for link in links))
    (tmp_path / "escape.png").write_bytes(b"x")
    with pytest.raises(error, match=match):
        publish(run, tmp_path / "pub")
    assert not (tmp_path / "pub").exists()


def test_publish_needs_a_finished_run(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "report.md").write_text("# Run\n")
    with pytest.raises(FileNotFoundError, match=r"no results\.json in"):
        publish(tmp_path / "run", tmp_path / "pub")


def test_cli_publishes_each_run_under_its_name(tmp_path, capsys):
    runs = [_run_dir(tmp_path / "a"), _run_dir(tmp_path / "b", links=("x.png",))]
    assert main(["publish", *map(str, runs), "--to", str(tmp_path / "docs")]) == 0
    assert _tree(tmp_path / "docs" / "b") == {"report.md", "results.json", "x.png"}
    assert "published" in capsys.readouterr().err


def test_cli_publish_errors_are_one_line(tmp_path, capsys):
    assert main(["publish", str(tmp_path / "nothing"), "--to", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no report.md in" in err


# The committed results: every experiment has a published run, and its docs page shows it.


@pytest.mark.parametrize("name", list(EXPERIMENTS))
def test_every_experiment_has_committed_results_in_the_docs(name):
    published = RESULTS / name
    results = json.loads((published / "results.json").read_text(encoding="utf-8"))
    assert results["experiment"] == name
    # Published files are committed: no path of the machine that made them.
    assert not [s for s in _strings(results) if s.startswith(("/", "~")) or ":\\" in s]
    report = (published / "report.md").read_text(encoding="utf-8")
    assert report.startswith("# ")
    # Each table comes with the command that made it.
    assert f"`odebench run {name}" in report
    for link in IMAGE.findall(report):
        assert (published / link).is_file(), link
    assert _tree(published) == {"report.md", "results.json", *IMAGE.findall(report)}
    page = (
        ROOT
        / "docs"
        / "odebench"
        / ("training.md" if name == "quickstart" else f"experiments/{name}.md")
    )
    assert f"results/{name}/report.md" in page.read_text(encoding="utf-8"), page


# The Reproductions index (reproductions_table): a summary, the paper's claims, the checks.

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _sections(text: str) -> dict[str, list[list[str]]]:
    """The index's tables by heading, each a list of rows of cells (header and rule dropped)."""
    tables: dict[str, list[list[str]]] = {}
    for part in text.split("### ")[1:]:
        heading, _, body = part.partition("\n")
        lines = [line for line in body.splitlines() if line.startswith("| ")]
        tables[heading] = [line[2:-2].split(" | ") for line in lines[1:]]
    return tables


def _claim(kind: str, status: str, text: str, seeds: list[bool], verdict: str) -> dict[str, object]:
    return {
        "kind": kind, "text": text, "detail": "", "published": "yes", "cell": "1.0 ± 0.1",
        "holds": status in ("held", "passed"), "held_on_seeds": seeds, "status": status,
        "verdict": verdict,
    }  # fmt: skip


def _new_doc(**provenance: object) -> dict[str, object]:
    """A results.json as the template writes it now: kinds, statuses, provenance."""
    y, n = True, False
    claims = {
        "a": _claim("paper", "held", "ANODE is more accurate", [y, y, n], "held on 2 of 3 seeds"),
        "b": _claim("paper", "mixed", "NFE grows", [y, n, n], "mixed: held on 1 of 3 seeds"),
        "c": _claim("paper", "not held", "time is proportional", [n, n, n], "not held"),
        "d": _claim("paper", "contended", "refinement faster", [y, y, y], "contended: not judged"),
        "e": _claim("check", "passed", "a third of the parameters", [y, y, y], "passed"),
        "f": _claim("check", "failed", "memory flat in depth", [y, n, y], "failed on 1 of 3 seeds"),
    }  # fmt: skip
    return {
        "experiment": "anode-images", "mode": "standard", "seeds": [0, 1, 2],
        "data": "mnist (1024 train / 500 test)", "train_seconds": 150.0, "claims": claims,
        "details": {},
        "provenance": {"commit": COMMIT, "dirty": False, "contended": False, **provenance},
    }  # fmt: skip


def _index(tmp_path: Path, docs: dict[str, dict[str, object]], **kwargs: object) -> str:
    from odebench.experiments import reproductions_table

    for name, doc in docs.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps(doc))
    return reproductions_table(tmp_path, **kwargs)


def test_the_index_is_a_summary_then_the_claims_then_the_checks(tmp_path):
    text = _index(tmp_path, {"anode-images": _new_doc()})
    assert list(_sections(text)) == ["Summary", "Claims of the paper", "Checks of our code"]
    assert "| experiment | paper claims | checks | data | seeds | training | commit |" in text
    assert "| experiment | claim | published | ours (mean ± std) | verdict |" in text


def test_the_summary_counts_paper_claims_by_status_and_checks_passed(tmp_path):
    summary = _sections(_index(tmp_path, {"anode-images": _new_doc()}))["Summary"]
    assert summary == [
        [
            "[anode-images](anode-images.md)",
            "1 held · 1 mixed · 1 not held · 1 contended",
            "1 of 2 passed",
            "mnist (1024 train / 500 test)",
            "3",
            "2.5 min",
            f"`{COMMIT[:10]}`",
        ]
    ]


def test_the_summary_follows_the_experiments_order_one_row_each(tmp_path):
    docs = {name: {**_new_doc(), "experiment": name} for name in reversed(list(EXPERIMENTS)[:3])}
    summary = _sections(_index(tmp_path, docs, link=lambda name: None))["Summary"]
    assert [row[0] for row in summary] == list(EXPERIMENTS)[:3]


def test_the_claims_table_holds_paper_claims_and_the_checks_table_checks(tmp_path):
    tables = _sections(_index(tmp_path, {"anode-images": _new_doc()}, link=lambda name: None))
    claims, checks = tables["Claims of the paper"], tables["Checks of our code"]
    assert [row[1] for row in claims] == [
        "ANODE is more accurate", "NFE grows", "time is proportional", "refinement faster",
    ]  # fmt: skip
    assert [row[1] for row in checks] == ["a third of the parameters", "memory flat in depth"]
    assert claims[1] == [
        "anode-images",
        "NFE grows",
        "yes",
        "1.0 ± 0.1",
        "mixed: held on 1 of 3 seeds",
    ]
    assert [row[4] for row in checks] == ["passed", "failed on 1 of 3 seeds"]


def test_a_claim_held_on_the_mean_but_not_on_most_seeds_is_never_shown_held(tmp_path):
    tables = _sections(_index(tmp_path, {"pendulum": _new_doc()}, link=lambda name: None))
    claims = {row[1]: row[4] for row in tables["Claims of the paper"]}
    assert claims["NFE grows"].startswith("mixed")
    assert tables["Summary"][0][1].startswith("1 held ·")  # "a" alone


@pytest.mark.parametrize(
    ("provenance", "cell"),
    [
        ({}, f"`{COMMIT[:10]}`"),
        ({"dirty": True}, f"`{COMMIT[:10]}` (dirty)"),
        ({"commit": None}, "not from a checkout"),
    ],
)
def test_the_summary_shows_the_commit_the_run_ran_at(tmp_path, provenance, cell):
    summary = _sections(_index(tmp_path, {"anode-images": _new_doc(**provenance)}))["Summary"]
    assert summary[0][6] == cell


def test_a_contended_run_says_so_beside_its_training_time(tmp_path):
    summary = _sections(_index(tmp_path, {"anode-images": _new_doc(contended=True)}))["Summary"]
    assert summary[0][5] == "2.5 min, contended"


def test_runs_without_their_data_show_as_not_run_here(tmp_path):
    why = "not run here: needs CIFAR-10 (`odebench download cifar10`)"
    details = {"euler": [{"not_run": why}] * 3, "rk4": [{"not_run": why}] * 3}
    doc = {**_new_doc(), "claims": {}, "details": details, "train_seconds": 0.0002}
    text = _index(tmp_path, {"dissecting-augmentation": doc}, link=lambda name: None)
    tables = _sections(text)
    assert tables["Summary"][0][1:3] == ["2 of 2 runs not run (data absent)", "–"]
    assert tables["Summary"][0][5] == "0 s"
    assert tables["Claims of the paper"] == [
        ["dissecting-augmentation", f"*{why}*", "–", "–", "not run"]
    ]
    assert tables["Checks of our code"] == []
    assert "No published run declares a check." in text


def test_a_mode_other_than_standard_is_named_beside_the_seeds(tmp_path):
    doc = {**_new_doc(), "mode": "full", "seeds": [0, 1, 2, 3, 4]}
    assert _sections(_index(tmp_path, {"anode-images": doc}))["Summary"][0][4] == "5 (full)"


def test_the_index_regenerates_from_every_published_json():
    from odebench.experiments import reproductions_table

    tables = _sections(reproductions_table(RESULTS, link=lambda name: None))
    published = {
        name: json.loads((RESULTS / name / "results.json").read_text(encoding="utf-8"))
        for name in EXPERIMENTS
        if (RESULTS / name / "results.json").is_file()
    }
    assert [row[0] for row in tables["Summary"]] == list(published)
    rows = tables["Claims of the paper"] + tables.get("Checks of our code", [])
    for name, doc in published.items():
        claims = list((doc.get("claims") or {}).values())
        # The paper's claims' table comes first, then the checks', each in JSON order.
        claims = [c for c in claims if c["kind"] != "check"] + [
            c for c in claims if c["kind"] == "check"
        ]
        mine = [row for row in rows if row[0] == name and row[4] != "not run"]
        assert len(mine) == len(claims), name
        for row, claim in zip(mine, claims):
            assert row[4] == claim["verdict"], (name, row)
            if row[4].startswith("held"):
                assert 2 * sum(claim["held_on_seeds"]) > len(claim["held_on_seeds"]), (name, row)
        summary = next(row for row in tables["Summary"] if row[0] == name)
        assert summary[6].startswith(f"`{doc['provenance']['commit'][:10]}`")


def test_the_index_refuses_an_empty_folder(tmp_path):
    from odebench.experiments import reproductions_table

    with pytest.raises(FileNotFoundError, match=r"no \*/results\.json under"):
        reproductions_table(tmp_path)


def test_a_quick_run_is_never_published(tmp_path):
    run = _run_dir(tmp_path / "run")
    (run / "results.json").write_text('{"experiment": "fake", "mode": "quick"}')
    with pytest.raises(ValueError, match="holds a quick run, a smoke test and not a result"):
        publish(run, tmp_path / "pub")
    assert not (tmp_path / "pub").exists()


def test_a_run_is_never_published_as_another_experiment(tmp_path):
    """The docs show docs/results/NAME as the experiment NAME: a chen-table1 run published
    into a folder named pendulum showed as pendulum's results in its page and the index."""
    run = _run_dir(tmp_path / "pendulum")
    (run / "results.json").write_text(
        json.dumps({"experiment": "chen-table1", "provenance": _clean_provenance()})
    )
    with pytest.raises(ValueError, match="holds a run of 'chen-table1', not of 'pendulum'"):
        publish(run, tmp_path / "docs" / "pendulum")
    assert not (tmp_path / "docs").exists()
