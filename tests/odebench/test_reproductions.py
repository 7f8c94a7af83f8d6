"""``publish`` and the committed results that the docs' Reproductions pages include."""

from __future__ import annotations

import functools
import json
import re
import subprocess
from pathlib import Path

import pytest
from odebench.cli import main
from odebench.experiments import EXPERIMENTS, publish
from odebench.experiments._provenance import repository

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


def test_the_index_table_regenerates_from_every_published_json():
    from odebench.experiments import reproductions_table

    table = reproductions_table(RESULTS).splitlines()
    assert table[0].startswith("| experiment | claim | published | ours (mean ± std, n seeds) |")
    rows = [row.split(" | ") for row in table[2:]]
    published = {p.parent.name: json.loads(p.read_text()) for p in RESULTS.glob("*/results.json")}
    for name, doc in published.items():
        mine = [row for row in rows if row[0] == f"| [{name}]({name}.md)"]
        claims = list((doc.get("claims") or {}).values())
        not_run = {d["not_run"] for ds in doc["details"].values() for d in ds if "not_run" in d}
        assert len(mine) == max(len(claims) + len(not_run), 1), name
        assert {row[1] for row in mine[: len(not_run)]} == not_run
        for row, claim in zip(mine[len(not_run) :], claims):
            assert row[1] == claim["text"].replace("|", "\\|")
            assert row[3].endswith(
                f"({len(doc['seeds'])} seed{'s' if len(doc['seeds']) > 1 else ''})"
            )
            if "cell" in claim:
                assert row[3].startswith(claim["cell"]) and row[7] == claim["verdict"] + " |"
            assert row[5] == doc["mode"] or row[5].startswith("quick (a smoke test")


def test_the_index_table_refuses_an_empty_folder(tmp_path):
    from odebench.experiments import reproductions_table

    with pytest.raises(FileNotFoundError, match=r"no \*/results\.json under"):
        reproductions_table(tmp_path)


def test_runs_without_their_data_show_as_not_run_here(tmp_path):
    from odebench.experiments import reproductions_table

    why = "not run here: needs CIFAR-10 (`odebench download cifar10`)"
    details = {"euler": [{"not_run": why}] * 3, "rk4": [{"not_run": why}] * 3}
    doc = {"mode": "standard", "seeds": [0, 1, 2], "claims": {}, "details": details}
    (tmp_path / "continuousnet-cifar").mkdir()
    (tmp_path / "continuousnet-cifar" / "results.json").write_text(json.dumps(doc))
    rows = reproductions_table(tmp_path, link=lambda name: None).splitlines()[2:]
    assert rows == [f"| continuousnet-cifar | {why} | – | – | – | standard | – | not run here |"]


def test_a_quick_run_is_never_published(tmp_path):
    run = _run_dir(tmp_path / "run")
    (run / "results.json").write_text('{"experiment": "fake", "mode": "quick"}')
    with pytest.raises(ValueError, match="holds a quick run, a smoke test and not a result"):
        publish(run, tmp_path / "pub")
    assert not (tmp_path / "pub").exists()
