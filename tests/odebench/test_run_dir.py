"""A run folder's lock where the file system offers no hard links or no ``flock``."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket

import pytest
from odebench.training import RunExistsError
from odebench.training._run_dir import RunFolder


def _no_links(*args: object, **kwargs: object) -> None:
    raise OSError(errno.ENOTSUP, os.strerror(errno.ENOTSUP))


def _no_locks(*args: object, **kwargs: object) -> None:
    raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))


def test_without_hard_links_the_lock_is_created_in_place_and_held(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "link", _no_links)
    folder = RunFolder(tmp_path / "run")
    folder.acquire(lambda line: None)
    try:
        assert [p.name for p in folder.path.iterdir()] == [".lock"]  # no temporary file left
        assert json.loads((folder.path / ".lock").read_text())["pid"] == os.getpid()
        with pytest.raises(RunExistsError, match=f"in use by process {os.getpid()} "):
            RunFolder(folder.path).acquire(lambda line: None)
    finally:
        folder.release()
    assert not folder.path.exists()


def test_without_flock_the_pid_of_an_ended_holder_lets_the_lock_be_taken_over(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(fcntl, "flock", _no_locks)
    out = tmp_path / "run"
    out.mkdir()
    ended = {"pid": 2**22 + 1, "host": socket.gethostname(), "started": "now", "command": "x"}
    (out / ".lock").write_text(json.dumps(ended))
    lines: list[str] = []
    folder = RunFolder(out)
    folder.acquire(lines.append)
    try:
        assert json.loads((out / ".lock").read_text())["pid"] == os.getpid()
        assert lines == [f"{out}: took over the lock of process {2**22 + 1} on host "
                         f"{socket.gethostname()} (since now, x), which has ended"]  # fmt: skip
    finally:
        folder.release()
