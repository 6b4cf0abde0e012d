"""Disk infrastructure, written once: where caches live, how a file is written atomically, content hashes,
file locks, JSON caches and the package versions recorded with results.

One write policy for every cache file, store manifest and head-importance array (`atomic_write`): the bytes go
to a private temporary file in the target's own folder, are flushed and fsync'ed, the file is made readable by
the group and others (0o644: a cache may be shared by a lab's accounts), renamed over the target with
os.replace and the folder is fsync'ed. Readers see the old file or the new one, never half of one; two writers
of one entry both leave a whole file; a failed write leaves no temporary file behind. `write_cache` is the
same for caches, where a full or read-only disk costs the cache, not the result: it logs and carries on.

Content hashes are BLAKE2b: `digest` of a JSON-able object (cache keys), `bytes_digest`, `text_digest`,
`texts_hasher` (a dataset's texts), `array_digest`. Their values are stable across versions: they name files
already on disk (caches, store checksums, dataset fingerprints in store manifests).
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import tempfile
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Iterable, Iterator

log = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------------------ places
def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    """Where longviz caches its artefacts: the argument, else $LONGVIZ_CACHE_DIR, else ~/.cache/longviz."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    env = os.environ.get("LONGVIZ_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "longviz"


def cache_folder(name: str, cache_dir: str | os.PathLike | None = None) -> Path:
    """The cache's folder for one kind of artefact, e.g. cache_folder("attributions")."""
    return cache_root(cache_dir) / name


# ------------------------------------------------------------------------------------------------ writing
def atomic_write(path: str | os.PathLike, data: bytes) -> None:
    """Write `data` to `path` by the module's one policy (temporary file in the same folder, fsync, 0o644,
    os.replace, folder fsync'ed; the temporary file removed on any error, which is raised)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o644)  # mkstemp makes it private; the cache may be shared by the lab's accounts
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)  # the rename itself survives a power cut


def write_cache(path: str | os.PathLike, data: bytes) -> bool:
    """atomic_write for a cache entry: an OSError (full or read-only disk) is logged and costs the entry only.
    Returns whether the entry was written."""
    try:
        atomic_write(path, data)
        return True
    except OSError as exc:
        log.warning("Could not write the cache file %s: %s", path, exc)
        return False


def fsync_dir(path: str | os.PathLike) -> None:
    """fsync a folder, so that entries created or renamed in it are on disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def file_lock(path: str | os.PathLike) -> Iterator[None]:
    """An exclusive flock on `path` (created if missing) for the body: excludes other processes, and other
    threads of this one (each opens the file itself). The kernel releases it if the process dies."""
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


# ------------------------------------------------------------------------------------------------ hashes
def digest(obj, digest_size: int = 16) -> str:
    """A short stable hash of a JSON-able object (cache keys); keys sorted, anything else JSON cannot hold
    written with str()."""
    return bytes_digest(json.dumps(obj, sort_keys=True, default=str).encode(), digest_size)


def bytes_digest(data: bytes, digest_size: int = 16) -> str:
    return hashlib.blake2b(data, digest_size=digest_size).hexdigest()


def text_digest(text: str, digest_size: int = 16) -> str:
    """Hash of a text (lone surrogates allowed: uploaded files may hold them)."""
    return bytes_digest(text.encode("utf-8", "surrogatepass"), digest_size)


def texts_hasher(texts: Iterable, digest_size: int = 12):
    """A BLAKE2b hasher fed with every text and a record separator after each (texts in order); callers may
    add more (e.g. labels) before `.hexdigest()`."""
    h = hashlib.blake2b(digest_size=digest_size)
    for t in texts:
        h.update(str(t).encode("utf-8", "surrogatepass") + b"\x1e")
    return h


def array_digest(a, digest_size: int = 12) -> str | None:
    """Hash of an optional array's values (as float64) and shape, e.g. head importance, for cache keys."""
    if a is None:
        return None
    import numpy as np

    a = np.ascontiguousarray(np.asarray(a, dtype=np.float64))
    return bytes_digest(a.tobytes() + str(a.shape).encode(), digest_size)


def document_key(settings: dict, text: str) -> str:
    """Cache key of one document's results under `settings` (model fingerprint and every number-changing option)."""
    return digest({**settings, "text": text_digest(text)})


# ------------------------------------------------------------------------------------------------ JSON cache
class JsonStore:
    """One JSON file per key under <cache root>/<kind>/, written by write_cache; an unreadable file counts as
    missing (and is recomputed)."""

    def __init__(self, kind: str, cache_dir=None) -> None:
        self.root = cache_folder(kind, cache_dir)

    def path(self, key: str) -> Path:
        return self.root / f"{key}.json"

    def get(self, key: str):
        path = self.path(key)
        try:
            payload = json.loads(path.read_text(encoding="utf-8"))
            if payload.get("key") != key:
                raise ValueError("key mismatch")
            return payload["value"]
        except FileNotFoundError:
            return None
        except Exception as exc:  # json, unicode, key errors all mean one thing: recompute
            log.warning("Unreadable cache file %s (%s); recomputing.", path, exc)
            return None

    def put(self, key: str, value) -> None:
        write_cache(self.path(key), json.dumps({"key": key, "value": value}, allow_nan=True).encode("utf-8"))


# ------------------------------------------------------------------------------------------------ versions
def package_versions(packages: Iterable[str]) -> dict[str, str | None]:
    """Installed versions of `packages` (None for one that is not installed)."""
    out = {}
    for name in packages:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out
