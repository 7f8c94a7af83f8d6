"""Fetching the image data sets from the official mirrors, checked by MD5, written atomically."""

from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
import urllib.request
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ._dataset import CHUNK, DataError, file_digest


@dataclass(frozen=True)
class _Resource:
    mirrors: tuple[str, ...]  # base URLs, tried in order
    files: tuple[tuple[str, str], ...]  # (file name, MD5 of the file as published)
    extract_to: str | None = None  # for a tarball: the folder it unpacks to
    max_unpacked: int = 256 << 20  # for a tarball: the most bytes its members may declare


# Member count a tarball may have (the CIFAR tarballs have 8 and 5).
_MAX_MEMBERS = 1000
# What reading a truncated or corrupt tarball raises.
_UNREADABLE = (tarfile.TarError, OSError, EOFError, zlib.error)


_RESOURCES: dict[str, _Resource] = {
    "mnist": _Resource(
        mirrors=(
            "https://ossci-datasets.s3.amazonaws.com/mnist/",
            "http://yann.lecun.com/exdb/mnist/",
        ),
        files=(
            ("train-images-idx3-ubyte.gz", "f68b3c2dcbeaaa9fbdd348bbdeb94873"),
            ("train-labels-idx1-ubyte.gz", "d53e105ee54ea40749a09fcbcd1e9432"),
            ("t10k-images-idx3-ubyte.gz", "9fb629c4189551a2d022fa330f9573f3"),
            ("t10k-labels-idx1-ubyte.gz", "ec29112dd5afa0611ce80d1b7f02629c"),
        ),
    ),
    "fashion-mnist": _Resource(
        mirrors=(
            "https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/master/data/fashion/",
            "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
        ),
        files=(
            ("train-images-idx3-ubyte.gz", "8d4fb7e6c68d591d4c3dfef9ec88bf0d"),
            ("train-labels-idx1-ubyte.gz", "25c81989df183df01b3e8a0aad5dffbe"),
            ("t10k-images-idx3-ubyte.gz", "bef4ecab320f06d8554ea6380940ec79"),
            ("t10k-labels-idx1-ubyte.gz", "bb300cfdad3c16e7a12a480ee83cd310"),
        ),
    ),
    "cifar10": _Resource(
        mirrors=("https://www.cs.toronto.edu/~kriz/",),
        files=(("cifar-10-python.tar.gz", "c58f30108f718f92721af3b95e74349a"),),
        extract_to="cifar-10-batches-py",
    ),
    "cifar100": _Resource(
        mirrors=("https://www.cs.toronto.edu/~kriz/",),
        files=(("cifar-100-python.tar.gz", "eb9058c3a382ffc7106e4002c42a8d85"),),
        extract_to="cifar-100-python",
    ),
    "svhn": _Resource(
        mirrors=("http://ufldl.stanford.edu/housenumbers/",),
        files=(
            ("train_32x32.mat", "e26dedcc434d2e4c54c9b2d4a06d8373"),
            ("test_32x32.mat", "eb5a983be6a315427106f1b164d9cef3"),
        ),
    ),
}

DOWNLOADABLE = tuple(sorted(_RESOURCES))
"""The names :func:`download` (and ``odebench download NAME``) accepts."""


def _fetch(url: str, dest: Path) -> None:
    """Write the body of ``url`` to ``dest``. Tests replace this function."""
    request = urllib.request.Request(url, headers={"User-Agent": "odebench"})
    with urllib.request.urlopen(request, timeout=60) as response, dest.open("wb") as out:
        shutil.copyfileobj(response, out, CHUNK)


def _download_file(
    resource: _Resource, name: str, md5: str, directory: Path, *, force: bool
) -> None:
    """Fetch ``name`` into ``directory`` from the first mirror that serves the right bytes
    (one already there with the right MD5 is kept, unless ``force``)."""
    final = directory / name
    if not force and final.is_file() and file_digest(final, "md5") == md5:
        return
    failures = []
    for base in resource.mirrors:
        url = base + name
        fd, tmp_name = tempfile.mkstemp(prefix=f".{name}.", suffix=".part", dir=directory)
        os.close(fd)
        tmp = Path(tmp_name)
        try:
            try:
                _fetch(url, tmp)
            except OSError as err:  # urllib.error.URLError is one
                failures.append(f"{url}: {err}")
                continue
            got = file_digest(tmp, "md5")
            if got == md5:
                os.replace(tmp, final)
                return
            failures.append(f"{url}: MD5 {got}, expected {md5}")
        finally:
            tmp.unlink(missing_ok=True)
    raise DataError(
        f"Could not download {name} into {directory}; nothing was kept. Attempts: "
        + "; ".join(failures)
        + f". Download it by hand from one of those addresses into {directory}, then "
        "check its MD5."
    )


def _safe_extract(archive: Path, directory: Path, folder: str, max_bytes: int) -> Path:
    """Unpack ``archive``, its members checked before anything is written, into
    ``directory/folder`` in one rename."""
    with _open_tarball(archive) as tar:
        members = _checked_members(tar, archive, folder, max_bytes)
        staging = Path(tempfile.mkdtemp(prefix=f".{folder}.", dir=directory))
        # Where tarfile has extraction filters, the strictest one; the members are checked anyway.
        tar.extraction_filter = getattr(tarfile, "data_filter", None)
        try:
            try:  # tarfile refuses a member that ends before its declared size
                tar.extractall(staging, members)
            except (tarfile.TarError, EOFError, zlib.error) as err:
                raise DataError(
                    f"Cannot unpack {archive} ({err}); it is truncated or corrupt: delete it "
                    "and download it again."
                ) from err
            final = directory / folder
            if final.exists():
                shutil.rmtree(final)
            os.replace(staging / folder, final)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return final


def _open_tarball(archive: Path) -> tarfile.TarFile:
    try:
        return tarfile.open(archive, "r:*")
    except _UNREADABLE as err:
        raise DataError(
            f"Cannot open {archive} as a tarball ({err}); delete it and download it again."
        ) from err


def _checked_members(
    tar: tarfile.TarFile, archive: Path, folder: str, max_bytes: int
) -> list[tarfile.TarInfo]:
    """The members of ``tar``, each checked as its header is read (before the archive is
    inflated further): plain files and folders under ``folder``, at most ``max_bytes`` and
    :data:`_MAX_MEMBERS` members."""
    members: list[tarfile.TarInfo] = []
    total = 0
    try:  # each header is read as the loop asks for it
        for member in tar:
            parts = PurePosixPath(member.name).parts  # an absolute path's first part is "/"
            if (
                parts[:1] != (folder,)
                or ".." in parts
                or any(c in member.name for c in ":\\")  # a drive or a Windows separator
                or not (member.isfile() or member.isdir())
            ):
                raise DataError(
                    f"refusing to extract {archive}: its member {member.name!r} is not a "
                    f"plain file or directory under {folder}/ (absolute paths, '..', links "
                    "and devices are not allowed)."
                )
            members.append(member)
            total += member.size if member.isfile() else 0
            if total > max_bytes:
                raise DataError(
                    f"refusing to extract {archive}: its members up to {member.name!r} "
                    f"({member.size} bytes) declare {total} bytes once unpacked, more than the "
                    f"{max_bytes} bytes expected of it at most; nothing was written. Delete it "
                    "and download it again."
                )
            if len(members) > _MAX_MEMBERS:
                raise DataError(
                    f"refusing to extract {archive}: it has more than {_MAX_MEMBERS} members; "
                    "nothing was written. Delete it and download it again."
                )
    except _UNREADABLE as err:
        raise DataError(
            f"Cannot read {archive} past its member {len(members) + 1} ({err}); it is "
            "truncated or corrupt: delete it and download it again."
        ) from err
    return members


def download(name: str, root: str | os.PathLike[str], *, force: bool = False) -> Path:
    """Download one of the image data sets from its official mirror, checked by MD5.

    A file takes its final name only once its MD5 is the published one; a CIFAR
    tarball is unpacked only if it is safe (the data page tables the mirrors, the
    folders and the checks).

    Args:
        name: ``"mnist"``, ``"fashion-mnist"``, ``"cifar10"``, ``"cifar100"`` or
            ``"svhn"``.
        root: the directory to download into; created if missing.
        force: fetch (and unpack) again even if the files are there.

    Returns:
        The directory to give the loader: ``load_mnist(download("mnist", root))``,
        ``load_cifar(download("cifar10", root))``, ``load_svhn(download("svhn", root))``.

    Raises:
        ValueError: for an unknown ``name``.
        DataError: if no mirror gives a file with the published MD5, or a tarball
            holds a member it refuses to extract, declares more than it may hold, or
            is truncated.

    Example:
        >>> from odebench.data import download
        >>> download("imagenet", "data")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: `name` must be one of cifar10, cifar100, ..., svhn, got 'imagenet'.
        >>> mnist = load_mnist(download("mnist", "data"))  # doctest: +SKIP
    """
    if name not in _RESOURCES:
        raise ValueError(f"`name` must be one of {', '.join(sorted(_RESOURCES))}, got {name!r}.")
    resource = _RESOURCES[name]
    root = Path(root)
    folder = resource.extract_to
    if folder is not None and (root / folder).is_dir() and not force:
        return root / folder
    directory = root / name if folder is None else root  # a tarball sits beside its folder
    directory.mkdir(parents=True, exist_ok=True)
    for file, md5 in resource.files:
        _download_file(resource, file, md5, directory, force=force)
    if folder is None:
        return directory
    return _safe_extract(root / resource.files[0][0], root, folder, resource.max_unpacked)
