"""``RunFolder``: one run's output folder, held by one process, never silently overwritten;
and ``load_checkpoint``, which runs nothing a file could smuggle in."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import socket
import sys
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NotRequired, TypedDict

import torch
from torch import Tensor

from .._io import CHECKPOINT, Json, JsonObject, whole

Log = Callable[[str], None]

LOCK = ".lock"

#: The settings ``--resume`` may change: where and how the run goes on, and how long.
#: Every other setting of the run (a field of :class:`~odebench.training.TrainConfig`)
#: must equal the run's.
RESUMABLE = frozenset({"epochs", "device", "data_dir", "progress", "compile"})

#: What a checkpoint of :func:`~odebench.training.train` holds, at least.
_CHECKPOINT_KEYS = frozenset({"epoch", "batch", "model", "optimizer", "rng", "metrics"})

#: The way out of a bad checkpoint, closing each error that names one.
BAD_CHECKPOINT_FIX = "Delete it, or pass --overwrite to move the run aside and start afresh"


class Checkpoint(TypedDict):
    """What ``checkpoint.pt`` holds: where the run stands (``batch`` batches into
    ``epoch``), its state, its rows (``metrics``) and settings (``config``)."""

    epoch: int
    batch: int
    model: dict[str, Tensor]
    optimizer: dict[str, object]
    schedule: dict[str, object] | None
    rng: Tensor
    cuda_rng: NotRequired[Tensor | None]
    aug_rng: NotRequired[Tensor]
    order_rng: Tensor
    partial: NotRequired[dict[str, object] | None]  # the totals of the epoch it stopped in
    metrics: list[JsonObject]
    config: NotRequired[JsonObject]
    segments: NotRequired[list[JsonObject]]


class RunExistsError(FileExistsError):
    """The output directory holds a run (and ``resume`` was not asked for), or is in use."""


class RunFolderError(ValueError):
    """The output directory cannot hold a run (a file, a changed resume, a bad checkpoint)."""


class BadCheckpointError(RunFolderError):
    """A checkpoint that is empty, truncated, corrupt or holds more than tensors."""


@dataclass(frozen=True)
class _Holder:
    """Who holds a lock, as its lock file says."""

    pid: int | None
    host: str
    started: str
    command: str

    @classmethod
    def read(cls, text: str) -> _Holder:
        try:
            data = json.loads(text)
            pid = data["pid"]
            if not whole(1)(pid):
                raise TypeError
            return cls(pid, str(data["host"]), str(data["started"]), str(data["command"]))
        except (ValueError, KeyError, TypeError):
            return cls(None, "", "", "")

    def alive(self) -> bool:
        """Whether the holder runs still (as far as this host can tell: yes for another host)."""
        if self.pid is None:
            return False
        if self.host != socket.gethostname():
            return True
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass  # alive, under another user
        # Or a lock left by this very process (a run it did not end).
        return self.pid != os.getpid()

    def describe(self) -> str:
        what = f"process {self.pid} on host {self.host}" if self.pid else "an unknown process"
        more = ", ".join(
            x for x in (f"since {self.started}" if self.started else "", self.command) if x
        )
        return f"{what} ({more})" if more else what


def _flock(fd: int) -> bool | None:
    """Take an exclusive ``flock`` on ``fd`` without waiting: ``True`` when taken, ``False``
    when held elsewhere, ``None`` without such locks (the lock file's pid then decides)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EACCES, errno.EAGAIN):
            return False
        return None
    return True


class RunFolder:
    """One run's output folder: its lock, its no-overwrite rule, its resume check, as the
    training guide's "One run per folder" describes. The lock file is created whole
    (written under a temporary name, then hard-linked into place) and held with ``flock``.

    Args:
        path: the folder (created if missing).

    Example:
        >>> import tempfile
        >>> folder = RunFolder(Path(tempfile.mkdtemp()) / "run")
        >>> folder.acquire(print)
        >>> (folder.path / LOCK).exists(), folder.entries()
        (True, [])
        >>> folder.release()
        >>> (folder.path / LOCK).exists()
        False
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._fd: int | None = None
        self._created = False

    # -- the lock ----------------------------------------------------------------------

    def acquire(self, log: Log) -> None:
        """Lock the folder, creating it if needed.

        Raises:
            RunExistsError: another live process holds the lock.
            RunFolderError: the path is a file, or the folder cannot be created.
        """
        self._make()
        lock = self.path / LOCK
        for _ in range(20):
            try:
                fd = self._create(lock)
                if fd is None:
                    fd = self._take_over(lock, log)
            except PermissionError:
                raise RunFolderError(
                    f"--out {self.path}: no permission to write there; choose another --out"
                ) from None
            except RunExistsError:
                raise
            except OSError as exc:  # a full disk
                raise RunFolderError(
                    f"--out {self.path}: cannot write its lock there ({exc.strerror}); "
                    "free some space, or choose another --out"
                ) from None
            if fd is not None:
                self._fd = fd
                return
            time.sleep(0.05)  # the lock came and went meanwhile: look again
        raise RunExistsError(
            f"--out {self.path}: its lock {lock} keeps changing hands; "
            "another run is starting there, choose another folder"
        )

    def release(self) -> None:
        """Remove the lock (and the folder, if this run created it and left it empty)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            lock = self.path / LOCK
            with contextlib.suppress(OSError):
                if os.stat(lock).st_ino == os.fstat(fd).st_ino:
                    lock.unlink()
            os.close(fd)
        if self._created:  # also when the lock could not be written
            with contextlib.suppress(OSError):
                self.path.rmdir()  # only when empty

    def _make(self) -> None:
        if self.path.exists() and not self.path.is_dir():
            raise RunFolderError(f"--out {self.path} is a file, not a folder; choose another --out")
        self._created = not self.path.exists()
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise RunFolderError(
                f"--out {self.path}: a part of the path is a file; choose another --out"
            ) from None
        except OSError as exc:
            raise RunFolderError(
                f"--out {self.path}: cannot create the folder ({exc.strerror}); "
                "choose another --out"
            ) from None

    @staticmethod
    def _hold(fd: int) -> int:
        """``fd``, locked and holding who holds it (this process), synced; closed on failure."""
        holder = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": time.strftime("%Y-%m-%d %H:%M:%S"),
            "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])[:300],
        }
        try:
            _flock(fd)
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(holder) + "\n").encode("utf-8"), 0)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _create(self, lock: Path) -> int | None:
        """A new lock, whole and held from its first moment (created in place where the file
        system has no hard links); ``None`` if one exists."""
        tmp = lock.with_name(f"{LOCK}.{os.getpid()}.{time.monotonic_ns()}.tmp")
        try:
            fd = self._hold(os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644))
            try:
                os.link(tmp, lock)
                return fd
            except FileExistsError:
                os.close(fd)
                return None
            except PermissionError:
                os.close(fd)
                raise
            except OSError:  # no hard links: created in place below
                os.close(fd)
        finally:
            tmp.unlink(missing_ok=True)
        try:
            return self._hold(os.open(lock, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644))
        except FileExistsError:
            return None

    def _take_over(self, lock: Path, log: Log) -> int | None:
        """The existing lock, if its holder has ended; ``None`` if it vanished meanwhile
        (:class:`RunExistsError` if its holder runs still)."""
        try:
            fd = os.open(lock, os.O_RDWR)
        except FileNotFoundError:
            return None
        try:
            taken = _flock(fd)
            holder = _Holder.read(os.pread(fd, 4096, 0).decode("utf-8", "replace"))
            if taken is False or holder.alive() or (taken is None and holder.pid is None):
                local = holder.pid is not None and holder.host == socket.gethostname()
                hint = "" if local else f" (if no run uses the folder any more, delete {lock})"
                raise RunExistsError(
                    f"--out {self.path} is in use by {holder.describe()}; "
                    f"wait for it to end or choose another --out{hint}"
                )
            try:
                same = os.stat(lock).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
        except BaseException:
            os.close(fd)
            raise
        if not same:  # released and replaced while we looked: look again
            os.close(fd)
            return None
        self._hold(fd)
        log(f"{self.path}: took over the lock of {holder.describe()}, which has ended")
        return fd

    # -- what the folder holds -------------------------------------------------------

    def entries(self) -> list[Path]:
        """What the folder holds besides the lock and left-over temporary files."""
        if not self.path.is_dir():
            return []
        return sorted(
            p
            for p in self.path.iterdir()
            if p.name != LOCK and not (p.name.startswith(".") and p.name.endswith(".tmp"))
        )

    def move_aside(self, log: Log) -> None:
        """Move everything the folder holds (but the lock) into ``<folder>.old-<time>``."""
        entries = self.entries()
        if not entries:
            return
        stamp = time.strftime("%Y%m%d-%H%M%S")
        base = self.path if self.path.name else self.path.resolve()
        for n in range(1, 1000):
            aside = base.with_name(f"{base.name}.old-{stamp}" + (f"-{n}" if n > 1 else ""))
            try:
                aside.mkdir()
                break
            except FileExistsError:
                continue
        else:  # pragma: no cover - a thousand runs moved aside within a second
            raise RunFolderError(f"--out {self.path}: no free name to move the run aside to")
        try:
            for entry in entries:
                os.rename(entry, aside / entry.name)
        except OSError as exc:
            raise RunFolderError(
                f"--out {self.path}: cannot move {entry.name} aside to {aside} "
                f"({exc.strerror}); move the old run away yourself"
            ) from None
        log(f"moved the run in {self.path} aside to {aside}")

    def prepare(self, *, resume: bool, overwrite: bool, log: Log) -> None:
        """Apply the no-overwrite rule: refuse, keep (``resume``) or move aside (``overwrite``).

        Raises:
            RunExistsError: the folder holds a run and neither flag was given.
            RunFolderError: both flags were given.
        """
        if resume and overwrite:
            raise RunFolderError(
                "`resume` and `overwrite` exclude each other: resume continues the run in "
                f"{self.path}, overwrite moves it aside; choose one"
            )
        if overwrite:
            self.move_aside(log)
        elif not resume and self.entries():
            raise RunExistsError(
                f"{self.path} holds a run already; pass --resume to continue it, --overwrite "
                "to move it aside and start afresh, or choose another --out"
            )

    # -- resuming a training run ------------------------------------------------------

    def check_resume(
        self, settings: Mapping[str, Json], epochs: int, defaults: Mapping[str, Json]
    ) -> None:
        """Check that a run with ``settings`` may continue the training run in the folder:
        the saved settings (``defaults`` for those they lack) equal them but for
        :data:`RESUMABLE`, and ``epochs`` reaches the epochs done.

        Raises:
            BadCheckpointError: the checkpoint cannot be loaded safely.
            RunFolderError: the settings differ, or ``epochs`` is too small.
            RunExistsError: results without a checkpoint.
        """
        path = self.path / CHECKPOINT
        saved: Mapping[str, Json] | None = None
        if path.exists():
            state = load_checkpoint(path, torch.device("cpu"))
            saved = state.get("config")
            # A checkpoint inside an epoch (batch > 0) is one into epoch ``epoch + 1``.
            reached = int(state["epoch"]) + (1 if int(state["batch"]) > 0 else 0)
            if epochs < reached:
                raise RunFolderError(
                    f"{self.path} has reached epoch {reached} already; resume it with "
                    f"--epochs {reached} or more, not {epochs}"
                )
        elif any((self.path / n).exists() for n in ("metrics.json", "results.json")):
            raise RunExistsError(
                f"{self.path} holds a run's results but no {CHECKPOINT} to continue from; "
                "pass --overwrite to move it aside and start afresh, or choose another --out"
            )
        if not isinstance(saved, Mapping):
            saved = _saved_config(self.path / "config.json")
        if saved is None:
            return
        saved = {**defaults, **saved}  # a setting added since the run was saved had its default
        keys = [k for k in dict.fromkeys([*saved, *settings]) if k not in RESUMABLE]
        unset = "(unset)"
        changed = [k for k in keys if saved.get(k, unset) != settings.get(k, unset)]
        if changed:
            listed = ", ".join(
                f"{k} {saved.get(k, unset)!r} -> {settings.get(k, unset)!r}" for k in changed
            )
            raise RunFolderError(
                f"{self.path}: --resume with settings that differ from the run's: {listed}; "
                f"only {', '.join(sorted(RESUMABLE))} may change on resume. Resume with the "
                "run's settings, or pass --overwrite to move it aside and start afresh"
            )


def _saved_config(path: Path) -> Mapping[str, Json] | None:
    """The ``config`` of a run's ``config.json``; ``None`` when there is none to read."""
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        raise RunFolderError(
            f"{path} is not readable JSON; pass --overwrite to move the run aside and "
            "start afresh, or delete the file"
        ) from None
    config = saved.get("config") if isinstance(saved, dict) else None
    return config if isinstance(config, Mapping) else None


_GLOBAL = re.compile(r"GLOBAL ([\w.]+)")


def load_checkpoint(path: Path, device: torch.device) -> Checkpoint:
    """Load one of :func:`train`'s checkpoints with ``weights_only=True``: a file that asks
    for more than tensors and plain containers is refused before any of it runs.

    Raises:
        BadCheckpointError: the file is empty, truncated, corrupt, not a checkpoint of
            :func:`train` (a negative epoch or batch included), or asks for code to
            run; the message names the file.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            state: Checkpoint = torch.load(path, map_location=device, weights_only=True)
    except FileNotFoundError:
        raise
    except Exception as exc:  # torch raises many kinds; each means a bad file
        import pickle

        found = _GLOBAL.search(str(exc)) if isinstance(exc, pickle.UnpicklingError) else None
        if path.stat().st_size == 0:
            what = "is empty"
        elif found:
            what = (
                f"asks for code to run ({found.group(1)}), which a checkpoint never does; "
                "it was refused and nothing in it ran"
            )
        elif isinstance(exc, pickle.UnpicklingError) and "operand" not in str(exc):
            what = (
                "holds more than tensors and plain containers; it was refused and nothing in it ran"
            )
        else:
            what = "is truncated or corrupt"
        raise BadCheckpointError(f"{path} {what}. {BAD_CHECKPOINT_FIX}") from None
    if not isinstance(state, dict) or not state.keys() >= _CHECKPOINT_KEYS:
        what = "is not a checkpoint of an odebench training run"
    elif not (whole(0)(state["epoch"]) and whole(0)(state["batch"])):
        what = (
            f"records epoch {state['epoch']!r}, batch {state['batch']!r}; a checkpoint's "
            "position is two integers of at least 0"
        )
    else:
        return state
    raise BadCheckpointError(f"{path} {what}. {BAD_CHECKPOINT_FIX}")
