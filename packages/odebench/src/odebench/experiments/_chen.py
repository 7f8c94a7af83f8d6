"""``odebench run chen-table1``: Chen et al. (2018), Table 1 on MNIST."""

from __future__ import annotations

import statistics
import time
from datetime import datetime, timezone
from typing import Any

from torch import nn

from ..data import Dataset
from ..models import nfe
from ..perf._contnet import saved_bytes
from ..training import TrainConfig, load_model, resolve_device, train
from ..training._data import load_splits
from ..training._io import write_json, write_text
from ._registry import Log, RunOptions, fmt, held, prefixed, register

#: Table 1 of Chen et al. (2018): test error (%) and parameters, with the memory and
#: time complexities the paper gives (L: layers, L~: function evaluations).
PUBLISHED = {
    "mlp": {"error": 1.60, "params": "0.24M", "memory": "–", "time": "–"},
    "resnet": {"error": 0.41, "params": "0.60M", "memory": "O(L)", "time": "O(L)"},
    "rknet": {"error": 0.47, "params": "0.22M", "memory": "O(L~)", "time": "O(L~)"},
    "odenet": {"error": 0.42, "params": "0.22M", "memory": "O(1)", "time": "O(L~)"},
}
LABELS = {"mlp": "1-layer MLP", "resnet": "ResNet", "rknet": "RK-Net", "odenet": "ODE-Net"}


def _config(model: str, options: RunOptions) -> TrainConfig:
    """Chen et al.'s settings in full mode (torchdiffeq's reproduction of them: SGD,
    momentum 0.9, lr 0.1, batch 128, 160 epochs, steps at 60/100/140, random crops);
    a subset and one epoch in quick mode. The ODE-Net trains with the adjoint."""
    quick = options.quick
    return TrainConfig(
        model=model,
        dataset="mnist",
        epochs=options.epochs_or(1 if quick else 160),
        batch_size=32 if quick else 128,
        lr=0.05 if quick else 0.1,
        milestones=() if quick else (60, 100, 140),
        augment=not quick,
        train_size=512 if quick else None,
        test_size=256 if quick else None,
        gradient="adjoint" if model == "odenet" else "backprop",
        tol=1e-3,
        seed=options.seed,
        device=options.device,
        data_dir=options.data_dir,
        progress=options.progress,
    )


def _costs(model: nn.Module, test: Dataset, batch: int = 128) -> dict[str, float]:
    """Memory saved for the backward pass and the time of one training step, on one
    batch of test images (the median of three steps after a warm-up)."""
    device = next(model.parameters()).device
    x = test.normalize(test.inputs[:batch].to(device))
    y = test.targets[:batch].to(device)
    model.train()
    memory = saved_bytes(model, x, y) / 2**20
    times = []
    for _ in range(4):
        model.zero_grad(set_to_none=True)
        start = time.perf_counter()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()  # type: ignore[no-untyped-call]
        times.append(time.perf_counter() - start)
    forward, backward = nfe(model)
    return {
        "saved_mib": memory,
        "step_seconds": statistics.median(times[1:]),
        "nfe_forward": float(forward),
        "nfe_backward": float(backward),
        "batch": float(len(y)),
    }


@register(
    "chen-table1",
    "Chen et al. (2018) Table 1: MNIST test error, parameters, memory and time of the "
    "1-layer MLP, ResNet, RK-Net and ODE-Net",
)
def chen_table1(options: RunOptions, log: Log) -> dict[str, Any]:
    """Train the four models of Table 1 and write ``report.md`` beside the paper's."""
    started = time.perf_counter()
    rows: dict[str, dict[str, Any]] = {}
    # Every model sees the same data: read it once for the cost measurements.
    _, test = load_splits(_config("odenet", options))
    for name in PUBLISHED:
        config = _config(name, options)
        result = train(config, options.out / name, resume=options.resume, log=prefixed(log, name))
        model, _ = load_model(options.out / name, str(resolve_device(config.device)))
        final = result["final"] or {}
        acc = final.get("test_acc")
        rows[name] = {
            "parameters": result["parameters"],
            "test_error": None if acc is None else 1.0 - acc,
            "epochs": result["epochs"],
            "train_seconds": result["train_seconds"],
            **_costs(model, test, batch=32 if options.quick else 128),
        }
    summary = {
        "experiment": "chen-table1",
        "quick": options.quick,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "wall_seconds": time.perf_counter() - started,
        "models": rows,
        "published": PUBLISHED,
        "conclusions": _conclusions(rows),
    }
    write_json(options.out / "results.json", summary)
    write_text(options.out / "report.md", _report(summary, options))
    log(f"chen-table1: report in {options.out / 'report.md'}")
    return summary


def _conclusions(rows: dict[str, dict[str, Any]]) -> dict[str, bool]:
    """The paper's claims about memory, checked on our figures."""
    return {
        # O(1) memory: the adjoint saves less than backprop through the same steps.
        "odenet_saves_less_than_rknet": rows["odenet"]["saved_mib"] < rows["rknet"]["saved_mib"],
        "odenet_saves_less_than_resnet": rows["odenet"]["saved_mib"] < rows["resnet"]["saved_mib"],
        # About a third of the ResNet's parameters.
        "odenet_params_below_half_of_resnet": rows["odenet"]["parameters"]
        < 0.5 * rows["resnet"]["parameters"],
    }


def _report(summary: dict[str, Any], options: RunOptions) -> str:
    mode = " --quick" if options.quick else ""
    rows = summary["models"]
    lines = [
        "# Chen et al. (2018), Table 1: MNIST",
        "",
        f"`odebench run chen-table1{mode}`, {summary['date']}, "
        f"{summary['wall_seconds']:.0f} s in all.",
        "",
        "| model | test error (ours) | test error (paper) | parameters (ours) | parameters "
        "(paper) | saved for backward, MiB | memory (paper) | time per step, ms | "
        "time (paper) | NFE forward / backward |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in rows.items():
        p = PUBLISHED[name]
        nfe_cell = f"{r['nfe_forward']:.0f} / {r['nfe_backward']:.0f}" if r["nfe_forward"] else "–"
        lines.append(
            f"| {LABELS[name]} | {fmt(r['test_error'], '.2f', 100)}% | {p['error']:.2f}% | "
            f"{r['parameters'] / 1e6:.3f}M | {p['params']} | {fmt(r['saved_mib'], '.1f')} | "
            f"{p['memory']} | {fmt(r['step_seconds'], '.0f', 1e3)} | {p['time']} | {nfe_cell} |"
        )
    epochs = {r["epochs"] for r in rows.values()}
    claim = summary["conclusions"]
    lines += [
        "",
        f"Trained for {', '.join(str(e) for e in sorted(epochs))} epoch(s)"
        + (
            " on a subset (quick mode): the errors are far from the paper's."
            if options.quick
            else "."
        ),
        f"Memory is what autograd saves for the backward pass of one training step on a "
        f"batch of {int(next(iter(rows.values()))['batch'])} images;",
        "time is one training step on that batch. The ODE-Net",
        "trains with the adjoint method, which saves only the block's input and output.",
        "",
        "Claims checked on these figures:",
        "",
        f"- the ODE-Net's memory is below the RK-Net's (O(1) against O(L~)): "
        f"{held(claim['odenet_saves_less_than_rknet'])};",
        f"- the ODE-Net's memory is below the ResNet's: "
        f"{held(claim['odenet_saves_less_than_resnet'])};",
        f"- the ODE-Net has less than half the ResNet's parameters: "
        f"{held(claim['odenet_params_below_half_of_resnet'])}.",
        "",
    ]
    return "\n".join(lines)
