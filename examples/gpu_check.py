"""Check odebench's GPU path end to end in a few minutes, and write the timings as JSON.

Before a long run of every experiment's full mode on a GPU, this script checks that
each piece of that path works on the device, and times it:

* a few SGD training steps under bfloat16 autocast, on a synthetic batch made on the
  device, of each model family of ``odebench.models.build_model``: ``mlp``,
  ``resnet``, ``rknet``, ``odenet`` with the gradient by backprop, by the adjoint and
  by checkpointing (dopri5 at rtol = atol = 1e-3), ``anode``, ``sonode``,
  ``continuousnet`` (3 x 32 x 32 input) and ``toy-anode``;
* one epoch of the real trainer, ``odebench.training.train``, of the toy ANODE on
  ``annuli-2d`` in bfloat16, whose checkpoint must load back;
* ``DistributedDataParallel`` over NCCL with one process per GPU, when there are two
  or more: an ODE-Net trains on different data in each process, and the gradients and
  weights must come out the same in all of them. With one GPU the check is skipped,
  and says why; on the CPU (``--device cpu``) it runs over gloo with two processes.

* with ``--compile`` (``--only-compile``: those alone), odecore's compiled solve
  (``compile=True``) against its eager solve: rk4 x 100 on the Van der Pol, MLP and
  conv fields of ``odebench perf solvers`` (batch 256), forward and with backprop;
  each reports the compiled time, the compiled / eager ratio, the first call (the
  compile) and the distance from the eager and the float64 results (the compiled
  solve must be about as close to float64 as the eager one), and a
  forward solve is also replayed from a CUDA graph where one can be captured.

Every training check reports the median time of a step after a few warm-up steps,
images per second, the peak of allocated GPU memory (``torch.cuda.max_memory_allocated``)
and, for the ODE models, the function evaluations of the last step; it fails when a
loss is not finite or a parameter has no gradient or a non-finite one.

Run it from the repository root (with odecore, odelayers, contnet and odebench
installed):

    python examples/gpu_check.py --out gpu_check.json    # on a CUDA machine: a few minutes
    python examples/gpu_check.py --device cpu            # the same checks on the CPU
    python examples/gpu_check.py --smoke                 # one step per check, CPU: seconds
    python examples/gpu_check.py --smoke --device cuda   # the same, on the GPU
    python examples/gpu_check.py --only-compile          # compiled against eager solves

``--out`` names the JSON file, or a folder for ``gpu_check.json`` (default
``examples/output``). Without a CUDA device, and without ``--device cpu`` or
``--smoke``, the script stops with one line and exit status 2. It prints a table of
the checks and exits with status 1 if any of them failed.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import functools
import gc
import importlib
import json
import math
import os
import platform
import socket
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import odebench
import odecore
import torch
import torch.distributed as dist
from odebench.models import build_model, nfe
from odebench.training import TrainConfig, load_model, train
from torch import Tensor, nn
from torch.multiprocessing.spawn import spawn

CLASSES = 10
TOL = 1e-3  # rtol = atol of dopri5: Chen et al.'s MNIST setting, and odebench's default
LR = 0.01  # SGD with momentum 0.9; small enough that a few steps on noise stay finite
MNIST = (1, 28, 28)
CIFAR = (3, 32, 32)
TOY = (2,)
ALLOWED_SPREAD = 1e-6  # relative spread of the DDP checksums across processes


@dataclass(frozen=True)
class Sizes:
    """How much work each check does.

    Args:
        batch: examples per training step (per process, in the DDP check).
        warmup: untimed steps first (CUDA context, cuDNN's choice of kernels, allocator).
        steps: timed steps; the median is reported.
        train_size: training and test examples of the trainer's epoch; ``None``: all
            of ``annuli-2d`` (3000 and 1000).
        train_batch: the trainer's batch.
    """

    batch: int
    warmup: int
    steps: int
    train_size: int | None
    train_batch: int


FULL = Sizes(batch=128, warmup=3, steps=10, train_size=None, train_batch=128)
SMOKE = Sizes(batch=4, warmup=1, steps=1, train_size=64, train_batch=32)


@dataclass(frozen=True)
class Case:
    """One model to train: its name for ``build_model``, its input, and its gradient.

    Args:
        name: the check's name.
        model: a key of ``odebench.models.MODELS``.
        shape: one example: ``(C, H, W)`` for image models, ``(d,)`` for toy models.
        gradient: ``"backprop"``, ``"adjoint"`` or ``"checkpoint"``: the model solves
            with dopri5 at ``TOL``, differentiated so; ``None``: the model's own
            solver (or none).
    """

    name: str
    model: str
    shape: tuple[int, ...]
    gradient: str | None = None

    def build(self) -> nn.Module:
        """The model, freshly initialised, on the CPU."""
        spec = None
        if self.gradient is not None:
            spec = odecore.OdeSpec.from_method("dopri5", rtol=TOL, atol=TOL, gradient=self.gradient)
        return build_model(
            self.model,
            in_channels=self.shape[0],
            num_classes=CLASSES,
            image_size=self.shape[-1] if len(self.shape) == 3 else 0,
            spec=spec,
        )


ODENET = Case("odenet-backprop", "odenet", MNIST, "backprop")
CASES = (
    Case("mlp", "mlp", MNIST),
    Case("resnet", "resnet", MNIST),
    Case("rknet", "rknet", MNIST),
    ODENET,
    Case("odenet-adjoint", "odenet", MNIST, "adjoint"),
    Case("odenet-checkpoint", "odenet", MNIST, "checkpoint"),
    Case("anode", "anode", MNIST, "backprop"),
    Case("sonode", "sonode", MNIST, "backprop"),
    Case("continuousnet", "continuousnet", CIFAR),
    Case("toy-anode", "toy-anode", TOY, "backprop"),
)


@dataclass(frozen=True)
class Timing:
    """What a check measured: the seconds of its timed steps and what they processed."""

    seconds: tuple[float, ...]
    images: int  # per step, every process together
    detail: str = ""
    peak_mib: float | None = None  # measured elsewhere (DDP: by the first process)


@dataclass(frozen=True)
class Result:
    """One check in the JSON: ``ok`` is true when it passed, false when it failed and
    ``None`` when it was skipped (``skipped`` says why)."""

    name: str
    ok: bool | None
    seconds_per_step: float | None = None
    images_per_second: float | None = None
    peak_mib: float | None = None
    detail: str = ""
    error: str | None = None
    skipped: str | None = None


class CheckSkippedError(Exception):
    """A check that cannot run here; the message says why."""


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (a no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_mib(device: torch.device) -> float | None:
    """The peak of allocated GPU memory since the last reset, MiB; ``None`` on the CPU."""
    if device.type != "cuda":
        return None
    return torch.cuda.max_memory_allocated(device) / 2**20


def reset_peak(device: torch.device) -> None:
    """Start a new peak-memory measurement (a no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def synthetic_batch(
    shape: tuple[int, ...], n: int, device: torch.device, seed: int
) -> tuple[Tensor, Tensor]:
    """``n`` Gaussian inputs of ``shape`` and random labels, drawn on ``device``."""
    gen = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(n, *shape, generator=gen, device=device)
    y = torch.randint(0, CLASSES, (n,), generator=gen, device=device)
    return x, y


def time_steps(step: Callable[[], object], device: torch.device, sizes: Sizes) -> tuple[float, ...]:
    """Run ``step`` ``sizes.warmup`` times, then time it ``sizes.steps`` times."""
    for _ in range(sizes.warmup):
        step()
    seconds = []
    for _ in range(sizes.steps):
        synchronize(device)
        tick = time.perf_counter()
        step()
        synchronize(device)
        seconds.append(time.perf_counter() - tick)
    return tuple(seconds)


def check_gradients(model: nn.Module) -> None:
    """Raise unless every trainable parameter has a finite gradient."""
    params = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    missing = [name for name, p in params if p.grad is None]
    if missing:
        raise RuntimeError(f"{len(missing)} parameters have no gradient, first {missing[0]}")
    bad = [name for name, p in params if p.grad is not None and not torch.isfinite(p.grad).all()]
    if bad:
        raise FloatingPointError(f"{len(bad)} gradients are not finite, first {bad[0]}")


def train_steps(model: nn.Module, x: Tensor, y: Tensor, sizes: Sizes) -> tuple[float, ...]:
    """Time SGD steps of ``model`` on ``(x, y)`` under bfloat16 autocast; check the
    losses and the last step's gradients."""
    device = x.device
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    losses: list[Tensor] = []

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            logits = model(x)
        loss = nn.functional.cross_entropy(logits.float(), y)
        loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
        losses.append(loss.detach())

    seconds = time_steps(step, device, sizes)
    if not torch.isfinite(torch.stack(losses)).all():
        raise FloatingPointError(f"a loss is not finite: {[float(v) for v in losses]}")
    check_gradients(model)
    return seconds


def nfe_detail(model: nn.Module) -> str:
    """The function evaluations of the model's last step, or nothing without ODE layers."""
    forward, backward = nfe(model)
    return f"NFE {forward} + {backward}" if forward else ""


def model_check(case: Case, device: torch.device, sizes: Sizes) -> Timing:
    """Train ``case``'s model for a few steps on a synthetic batch."""
    torch.manual_seed(0)
    model = case.build().to(device)
    x, y = synthetic_batch(case.shape, sizes.batch, device, seed=0)
    return Timing(train_steps(model, x, y, sizes), sizes.batch, nfe_detail(model))


COMPILE_FIELDS = ("vdp", "mlp", "conv_relu")
"""The fields of the compile checks: ``odebench perf solvers``'s problems of those names."""

COMPILE_STEPS = 100  # rk4 steps of the compiled solves: the fixed-step solve compiles whole
COMPILE_BATCH = 256


def _solve_rk4(field: nn.Module, y0: Tensor, t1: float, compile: bool) -> Tensor:
    """``y(t1)`` by rk4 in ``COMPILE_STEPS`` steps from 0, eager or as one compiled graph."""
    sol = odecore.solve(
        field, y0, t0=0.0, t1=t1, solver=odecore.RK4(), dt0=t1 / COMPILE_STEPS, compile=compile
    )
    return sol.ys[-1]


def _cuda_graph(
    run: Callable[[], Tensor], device: torch.device
) -> tuple[Callable[[], Tensor], str]:
    """``run`` replayed from a CUDA graph, or ``run`` itself and why it could not be
    captured (a solve that reads a tensor on the host cannot be)."""
    if device.type != "cuda":
        return run, "CUDA graphs: CUDA only"
    try:
        stream = torch.cuda.Stream(device)  # type: ignore[no-untyped-call]
        stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(stream):
            for _ in range(2):
                run()
        torch.cuda.current_stream(device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = run()
    except Exception as exc:  # the reason is the result: it goes into the note
        torch.cuda.synchronize(device)
        lines = str(exc).strip().splitlines() or [""]
        return run, f"CUDA graph not captured ({type(exc).__name__}: {lines[0][:80]})"

    def replay() -> Tensor:
        graph.replay()
        return out

    return replay, ""


def compile_check(name: str, backward: bool, device: torch.device, sizes: Sizes) -> Timing:
    """rk4 x ``COMPILE_STEPS`` of ``name``'s field: compiled against eager odecore.

    Reports the compiled solve's time per solve (forward, or forward + backward by
    backprop); the detail gives the eager time, the ratio, the first call (the
    compile) and the largest differences from the eager and the float64 results: the
    compiled solve must be within 1e-5 relative of the float64 one, or within three
    times the eager float32 solve's own distance from it. Forward solves are also
    replayed from a CUDA graph where one can be captured.
    """
    from odebench.perf._problems import Sizes as ProblemSizes
    from odebench.perf._problems import make_problem

    problem_sizes = ProblemSizes(mlp_batch=COMPILE_BATCH, vdp_batch=COMPILE_BATCH)
    if sizes is SMOKE:
        problem_sizes = ProblemSizes.quick()
    problem = make_problem(name, problem_sizes, seed=0)
    field = problem.field.to(device)
    y0 = problem.y0.to(device)
    t1 = problem.t1 - problem.t0

    def run(compile: bool, f: nn.Module = field, y0: Tensor = y0) -> Callable[[], Tensor]:
        def once() -> Tensor:
            if not backward:
                with torch.no_grad():
                    return _solve_rk4(f, y0, t1, compile)
            y = y0.detach().requires_grad_(True)
            f.zero_grad(set_to_none=True)
            _solve_rk4(f, y, t1, compile).square().sum().backward()  # type: ignore[no-untyped-call]
            assert y.grad is not None
            return y.grad

        return once

    eager, compiled = run(False), run(True)
    synchronize(device)
    tick = time.perf_counter()
    out_compiled = compiled()
    synchronize(device)
    first = time.perf_counter() - tick
    out_eager = eager()
    # The two float32 solves round differently, which a long solve amplifies: the
    # compiled one must be about as close to the float64 solve as the eager one is.
    exact = run(False, copy.deepcopy(field).double(), y0.double())()
    scale = float(exact.abs().max()) or 1.0
    diff = float((out_compiled - out_eager).abs().max()) / scale
    rounding = float((out_eager.double() - exact).abs().max()) / scale
    error = float((out_compiled.double() - exact).abs().max()) / scale
    if not error <= max(1e-5, 3 * rounding):
        raise AssertionError(
            f"the compiled solve is {error:.1e} (relative) from the float64 solve, the eager "
            f"one {rounding:.1e}: over 1e-5 and three times the eager solve's rounding"
        )
    eager_s = statistics.median(time_steps(eager, device, sizes))
    seconds = time_steps(compiled, device, sizes)
    ratio = statistics.median(seconds) / eager_s
    detail = (
        f"eager {1e3 * eager_s:.2f} ms, compiled/eager {ratio:.2f}, first call {first:.0f} s, "
        f"from eager {diff:.0e}, from float64 {error:.0e} (eager {rounding:.0e})"
    )
    if not backward:
        graphed, why = _cuda_graph(compiled, device)
        if why:
            detail += f"; {why}"
        else:
            graph_s = statistics.median(time_steps(graphed, device, sizes))
            detail += f"; CUDA graph {1e3 * graph_s:.2f} ms ({graph_s / eager_s:.2f} of eager)"
    return Timing(seconds, problem.y0.shape[0], detail)


def trainer_check(device: torch.device, sizes: Sizes) -> Timing:
    """One epoch of ``odebench.training.train``; its results and checkpoint are checked."""
    config = TrainConfig(
        model="toy-anode",
        dataset="annuli-2d",
        epochs=1,
        batch_size=sizes.train_batch,
        optimizer="adam",
        lr=1e-2,
        train_size=sizes.train_size,
        test_size=sizes.train_size,
        bf16=True,
        device=str(device),
        progress=False,
    )
    with tempfile.TemporaryDirectory() as tmp:
        results = train(config, Path(tmp) / "run", log=lambda line: None)
        model, _ = load_model(Path(tmp) / "run", device=str(device))
    final = results["final"]
    if results["epochs"] != 1 or final is None:
        raise RuntimeError(f"the trainer ran {results['epochs']} epochs, not 1")
    losses = {key: final[key] for key in ("train_loss", "test_loss")}
    if not all(isinstance(v, float) and math.isfinite(v) for v in losses.values()):
        raise FloatingPointError(f"the trainer's losses are not finite: {losses}")
    with torch.no_grad():  # the checkpoint loads back onto the device and runs
        out = model(torch.zeros(sizes.batch, *TOY, device=device))
    if not torch.isfinite(out).all():
        raise FloatingPointError("the model loaded from the checkpoint gives non-finite outputs")
    seconds = sizes.train_batch / final["images_per_second"]
    detail = f"1 epoch of {results['examples']['train']}, test loss {final['test_loss']:.3f}"
    return Timing((seconds,), sizes.train_batch, detail)


def free_port() -> int:
    """A TCP port free on this machine now, for the process group's rendezvous."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def ddp_check(device: torch.device, sizes: Sizes, threads: int | None) -> Timing:
    """An ODE-Net under ``DistributedDataParallel``, one process per GPU (NCCL), or two
    processes on the CPU (gloo)."""
    if device.type == "cuda":
        world, backend = torch.cuda.device_count(), "nccl"
        if world < 2:
            raise CheckSkippedError(f"{world} CUDA device; DDP over NCCL needs at least 2")
    else:  # two processes start and run a step in a few seconds
        world, backend = 2, "gloo"
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "rank0.json"
        args = (world, backend, free_port(), sizes, threads, str(report))
        spawn(ddp_worker, args=args, nprocs=world)  # type: ignore[no-untyped-call]
        first = json.loads(report.read_text(encoding="utf-8"))
    detail = f"{world} processes, {backend}"
    return Timing(tuple(first["seconds"]), sizes.batch * world, detail, first["peak_mib"])


def ddp_worker(
    rank: int, world: int, backend: str, port: int, sizes: Sizes, threads: int | None, report: str
) -> None:
    """One process of the DDP check; the first one writes its timings to ``report``."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    if threads is not None:
        torch.set_num_threads(threads)
    device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    # Imported before the group starts, so that its defaults do not hold the group
    # (as odebench's trainer does; DDP imports it when it first wraps a module).
    importlib.import_module("torch.distributed.nn.functional")
    dist.init_process_group(
        backend, rank=rank, world_size=world, timeout=datetime.timedelta(minutes=2)
    )
    try:
        torch.manual_seed(0)
        model = ODENET.build().to(device)
        ids = [rank] if device.type == "cuda" else None
        wrapped = nn.parallel.DistributedDataParallel(model, device_ids=ids)
        x, y = synthetic_batch(ODENET.shape, sizes.batch, device, seed=1 + rank)
        seconds = train_steps(wrapped, x, y, sizes)
        check_agreement(model)
        if rank == 0:
            result = {"seconds": seconds, "peak_mib": peak_mib(device)}
            Path(report).write_text(json.dumps(result), encoding="utf-8")
        del wrapped
    finally:
        gc.collect()  # nothing may hold the DDP wrapper when the group ends
        dist.destroy_process_group()


def check_agreement(model: nn.Module) -> None:
    """Raise unless every process holds the same gradients and weights.

    Each process trained on its own batch, so the gradients agree only if DDP
    averaged them.
    """
    params = [p for p in model.parameters() if p.grad is not None]
    grads = torch.cat([p.grad.detach().double().flatten() for p in params if p.grad is not None])
    weights = torch.cat([p.detach().double().flatten() for p in params])
    sums = torch.stack([grads.sum(), grads.square().sum(), weights.sum(), weights.square().sum()])
    low, high = sums.clone(), sums.clone()
    dist.all_reduce(low, op=dist.ReduceOp.MIN)
    dist.all_reduce(high, op=dist.ReduceOp.MAX)
    spread = float(((high - low).abs() / high.abs().clamp_min(1e-30)).max())
    if not spread <= ALLOWED_SPREAD:
        raise RuntimeError(f"gradients or weights differ across processes (relative {spread:.2e})")


def run_check(name: str, body: Callable[[], Timing], device: torch.device) -> Result:
    """Run one check: its timing, or its failure, or why it was skipped."""
    reset_peak(device)
    try:
        timing = body()
    except CheckSkippedError as reason:
        return Result(name, None, skipped=str(reason))
    except Exception as exc:  # a failed check is reported, and the others still run
        traceback.print_exc()
        lines = str(exc).strip().splitlines() or [""]
        return Result(name, False, error=f"{type(exc).__name__}: {lines[-1]}")
    median = statistics.median(timing.seconds)
    peak = timing.peak_mib if timing.peak_mib is not None else peak_mib(device)
    return Result(name, True, median, timing.images / median, peak, timing.detail)


def device_name(device: torch.device) -> str:
    """The GPU's name, or the processor's (from ``/proc/cpuinfo`` on Linux)."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text(encoding="utf-8").splitlines() if cpuinfo.exists() else []
    names = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
    return names[0] if names else platform.processor() or platform.machine()


def environment(device: torch.device) -> dict[str, Any]:
    """Versions and the device, for the JSON."""
    cuda = device.type == "cuda"
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if cuda else None,  # type: ignore[no-untyped-call]
        "odebench": odebench.__version__,
        "device": str(device),
        "device_name": device_name(device),
        "device_count": torch.cuda.device_count(),
        "threads": torch.get_num_threads(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def print_table(results: list[Result]) -> None:
    """One line per check: status, ms per step, images per second, peak MiB, note."""

    def num(value: float | None, digits: int) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    header = f"{'check':<19}{'status':<8}{'ms/step':>9}{'img/s':>9}{'peak MiB':>10}  note"
    print(header)
    print("-" * len(header))
    for r in results:
        status = {True: "ok", False: "FAILED", None: "skipped"}[r.ok]
        ms = None if r.seconds_per_step is None else 1000 * r.seconds_per_step
        note = r.error or r.skipped or r.detail
        print(
            f"{r.name:<19}{status:<8}{num(ms, 1):>9}{num(r.images_per_second, 0):>9}"
            f"{num(r.peak_mib, 1):>10}  {note}"
        )


def json_path(out: Path) -> Path:
    """``out`` when it names a ``.json`` file, else ``out/gpu_check.json``."""
    return out if out.suffix == ".json" else out / "gpu_check.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Check odebench's GPU path end to end (training steps of each model "
        "family in bfloat16, adjoint, checkpoint, the trainer, DDP) and time it."
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).resolve().parent / "output",
        help="the JSON file, or a folder for gpu_check.json (default: examples/output)",
    )
    parser.add_argument(
        "--device",
        choices=("cuda", "cpu"),
        default=None,
        help="where the checks run (default: cuda; cpu with --smoke)",
    )
    parser.add_argument("--smoke", action="store_true", help="one step per check: seconds")
    parser.add_argument("--threads", type=int, default=None, help="torch threads on the CPU")
    parser.add_argument(
        "--compile",
        action="store_true",
        help="add the compile checks: rk4 x 100 compiled against eager odecore, forward and "
        "backprop, on a Van der Pol, an MLP and a conv field (a minute or more each: they compile)",
    )
    parser.add_argument(
        "--only-compile", action="store_true", help="the compile checks alone (implies --compile)"
    )
    args = parser.parse_args(argv)
    if args.threads is not None and args.threads < 1:
        parser.error("--threads must be positive")
    device = torch.device(args.device or ("cpu" if args.smoke else "cuda"))
    if device.type == "cuda" and not torch.cuda.is_available():
        print(
            f"gpu_check: torch {torch.__version__} sees no CUDA device; run it on a GPU "
            "machine, or pass --device cpu (or --smoke) to run the same checks on the CPU",
            file=sys.stderr,
        )
        return 2
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    sizes = SMOKE if args.smoke else FULL

    start = time.perf_counter()
    checks: list[tuple[str, Callable[[], Timing]]] = []
    if not args.only_compile:
        checks += [
            (case.name, functools.partial(model_check, case, device, sizes)) for case in CASES
        ]
        checks.append(("trainer", functools.partial(trainer_check, device, sizes)))
        checks.append(("ddp", functools.partial(ddp_check, device, sizes, args.threads)))
    if args.compile or args.only_compile:
        for field_name in COMPILE_FIELDS:
            for backward in (False, True):
                check = f"compile-{field_name}-{'bp' if backward else 'fwd'}"
                body: Callable[[], Timing] = functools.partial(
                    compile_check, field_name, backward, device, sizes
                )
                checks.append((check, body))
    results = []
    for name, body in checks:
        print(f"{name} ...", file=sys.stderr, flush=True)
        results.append(run_check(name, body, device))
        last = results[-1]
        print(f"  {last.error or last.skipped or last.detail or 'ok'}", file=sys.stderr, flush=True)
    wall = time.perf_counter() - start

    env = environment(device)
    print(f"GPU path check on {env['device_name']} ({device}), torch {env['torch']}")
    print(f"  bfloat16 autocast, SGD, batch {sizes.batch}; median of {sizes.steps} steps\n")
    print_table(results)
    path = json_path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "environment": env,
        "sizes": asdict(sizes),
        "smoke": args.smoke,
        "wall_seconds": wall,
        "checks": [asdict(r) for r in results],
    }
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    print(f"\nwrote {path}")
    print(f"done in {wall:.1f} s")
    failed = [r.name for r in results if r.ok is False]
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
