"""``odebench train``'s options come from ``TrainConfig``'s fields: one per field, each
field's value from its option."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from odebench import cli, main
from odebench.training import TrainConfig


def _options(command: str) -> set[str]:
    """The options of ``odebench COMMAND``."""
    parser = cli._parser([command])
    (commands,) = (a for a in parser._actions if a.dest == "command")
    return {s for a in commands.choices[command]._actions for s in a.option_strings}


def test_every_field_is_an_option_or_says_it_is_none():
    train, run = _options("train"), _options("run")
    expected = set()
    for f in dataclasses.fields(TrainConfig):
        assert "flag" in f.metadata, f"TrainConfig.{f.name}: no metadata 'flag' (see _flag)"
        flag = f.metadata["flag"]
        option = "--" + f.name.replace("_", "-")
        if flag is None:  # no option: the field keeps its default
            assert option not in train
            continue
        if flag == "shared":  # declared once for train and run
            assert option in run, f.name
        else:
            assert flag["help"], f.name
            option = flag.get("option", option)
        assert option in train, f.name
        expected.add(option)
    assert train - {"-h", "--help", "--out", "--resume", "--overwrite", "--no-progress"} == expected


def _defaults() -> dict[str, object]:
    """The defaults of the fields that are options (``MISSING``: none)."""
    return {
        f.name: {} if f.default_factory is not dataclasses.MISSING else f.default
        for f in dataclasses.fields(TrainConfig)
        if f.metadata["flag"] is not None
    }


#: Command lines of ``odebench train``; the fields of the TrainConfig they make (the
#: others: defaults), its output folder, and how ``train`` runs it.
_COMMAND_LINES = [
    (
        "--model odenet --dataset mnist --epochs 3 --batch-size 7 --eval-batch-size 9 "
        "--lr 0.5 --optimizer sgd --momentum 0.5 --weight-decay 0.01 --milestones 3,5 "
        "--gamma 0.2 --seed 5 --device cpu --data-dir dd --train-size 100 --test-size 50 "
        "--augment --activation softplus --method rk4 "
        "--gradient adjoint --n-steps 4 --solver-option max_num_steps=1000 --bf16 "
        "--compile --no-progress --out oo --resume",
        {
            "model": "odenet", "dataset": "mnist", "epochs": 3, "batch_size": 7,
            "eval_batch_size": 9, "lr": 0.5, "optimizer": "sgd", "momentum": 0.5,
            "weight_decay": 0.01, "milestones": (3, 5), "gamma": 0.2, "seed": 5,
            "device": "cpu", "data_dir": "dd", "train_size": 100, "test_size": 50,
            "augment": True, "activation": "softplus", "method": "rk4",
            "gradient": "adjoint", "n_steps": 4,
            "solver_options": {"max_num_steps": 1000}, "refine_epochs": (), "bf16": True,
            "compile": True, "progress": False,
        },
        Path("oo"),
        {"resume": True, "overwrite": False},
    ),
    (
        "--model continuousnet --dataset cifar10 --method rk4 --n-steps 2 "
        "--refine-epochs 2,4 --optimizer adam --progress --overwrite",
        {"model": "continuousnet", "dataset": "cifar10", "method": "rk4", "n_steps": 2,
         "refine_epochs": (2, 4), "optimizer": "adam", "progress": True},
        Path("runs/continuousnet-cifar10"),
        {"resume": False, "overwrite": True},
    ),
    (
        "--model odenet --dataset mnist --method bosh3 --rtol 1e-4 --atol 1e-5",
        {"model": "odenet", "dataset": "mnist", "method": "bosh3", "rtol": 1e-4, "atol": 1e-5},
        Path("runs/odenet-mnist"),
        {"resume": False, "overwrite": False},
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "expected", "out", "how"),
    _COMMAND_LINES,
    ids=["odenet", "continuousnet", "tolerances"],
)
def test_a_command_line_reaches_every_field(argv, expected, out, how, monkeypatch):
    calls = []
    monkeypatch.setattr(
        "odebench.training.train", lambda config, out, **kw: calls.append((config, out, kw))
    )
    assert main(["train", *argv.split()]) == 0
    ((config, where, keywords),) = calls
    assert config.to_dict() == TrainConfig(**expected).to_dict()
    assert where == out
    assert {k: keywords[k] for k in how} == how


def test_the_command_lines_above_set_every_field():
    """Each field that is an option differs from its default in one of
    :data:`_COMMAND_LINES`, so each is seen to arrive."""
    default = _defaults()
    changed = {
        name
        for _, expected, _, _ in _COMMAND_LINES
        for name, value in expected.items()
        if value != default.get(name)
    }
    assert changed == set(default)
