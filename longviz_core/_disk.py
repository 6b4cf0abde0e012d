"""Disk infrastructure, written once: where caches live, how a file is written atomically and read within a bound,
content hashes, file locks, JSON caches and the package versions recorded with results.

One write policy for every cache file, store manifest and head-importance array (`atomic_write`): the bytes go
to a private temporary file in the target's own folder, are flushed and fsync'ed, the file is made readable by
the group and others (0o644: a cache may be shared by a lab's accounts), renamed over the target with
os.replace and the folder is fsync'ed. Readers see the old file or the new one, never half of one; two writers
of one entry both leave a whole file; a failed write leaves no temporary file behind. `write_cache` is the
same for caches, where a full or read-only disk costs the cache, not the result: it logs and carries on.
Cache files are `sealed`: a first line with the BLAKE2b of the rest, checked by `unsealed` as the file is read,
so a truncated, overwritten or bit-flipped entry is recomputed rather than served. Every disk cache goes through
the one sealed-cache helper: `write_sealed` (sealed + atomic write), `open_sealed` (checksum checked, the payload
decoded; a damaged file is a CacheCorruptError) and `read_sealed` (the same, None when absent or damaged, so the
caller recomputes and rewrites the entry); entries are named by content keys (`digest`).

One read policy for every file longviz parses (`read_file`): a regular file (a folder, a device such as /dev/zero, a
FIFO are refused by name; a symbolic link too where the caller says links are not its own), read to at most a
limit (`read_bounded`, also for streams), so a file linked to an endless device or grown past any sense is a typed
error naming it instead of a MemoryError or a read that never ends. The limits: METADATA_BYTES for manifests,
unit metadata, configurations and sidecars, CACHE_BYTES for cache entries; datasets and store arrays name
their own.

Content hashes are BLAKE2b: `digest` of a JSON-able object (cache keys), `bytes_digest`,
`texts_hasher` (a dataset's texts), `array_digest`. Their values are stable across versions: they name files
already on disk (caches, store checksums, dataset fingerprints in store manifests).
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import logging
import os
import stat
import tempfile
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Callable, Iterable, Iterator, TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")


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


# ------------------------------------------------------------------------------------------------ reading
METADATA_BYTES = 16 * 2**20  # a manifest, a unit's meta.json, a configuration, a sidecar: far more than any holds
CACHE_BYTES = 2**30  # one cache entry (attributions, flip scans, head importance, timings)


def read_bounded(stream, what: str, limit: int, error: type[Exception], fix: str = "") -> bytes:
    """At most `limit` bytes of `stream`; `error` naming `what` (and `fix`) when it holds more (an endless stream
    is read only to the limit)."""
    data = stream.read(limit + 1)
    if len(data) > limit:
        raise error(f"{what} is larger than {_size(limit)}" + (f"; {fix}" if fix else "") + ".")
    return data


def read_file(path: str | os.PathLike, what: str, limit: int, error: type[Exception], *, fix: str = "",
              links: bool = True) -> bytes:
    """The bytes of the file `what` at `path` by the module's one read policy: a regular file of at most `limit`
    bytes (with `links` False, not a symbolic link either), else `error` naming `what`, the fault and `fix`.
    FileNotFoundError when nothing is there: what absence means is the caller's to say."""
    def fault(text: str) -> Exception:
        return error(f"{what} {text}" + (f"; {fix}" if fix else "") + ".")

    flags = os.O_RDONLY | os.O_NONBLOCK | (0 if links else os.O_NOFOLLOW)  # O_NONBLOCK: a FIFO opens at once
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno == errno.ELOOP and not links:
            raise fault("is a symbolic link, and is read only as a file of its own") from None
        raise fault(f"cannot be read ({exc.strerror or exc})") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise fault("is a folder, not a file" if stat.S_ISDIR(mode) else
                    "is not a regular file (a device, socket or pipe)")
    with os.fdopen(fd, "rb") as fh:
        try:
            return read_bounded(fh, what, limit, error, fix)
        except OSError as exc:
            raise fault(f"cannot be read ({exc.strerror or exc})") from None


def _size(n: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:g} {unit}"
    return f"{n} bytes"


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


_SEAL = b"longviz-blake2b:"


def sealed(data: bytes) -> bytes:
    """`data` behind a one-line header holding its BLAKE2b, for cache files (see `unsealed`)."""
    return _SEAL + bytes_digest(data).encode() + b"\n" + data


def unsealed(data: bytes) -> bytes:
    """The payload of a `sealed` file; ValueError when the header is missing or the payload's checksum differs
    (a truncated, overwritten or bit-flipped file)."""
    header, _, body = data.partition(b"\n")
    if not header.startswith(_SEAL):
        raise ValueError("no checksum header (not a longviz cache file, or written by an older version)")
    if header[len(_SEAL):] != bytes_digest(body).encode():
        raise ValueError("checksum mismatch: the file is damaged")
    return body


def write_sealed(path: str | os.PathLike, data: bytes) -> bool:
    """Write a cache entry: `data` sealed (checksum header), written atomically by write_cache (a full or read-only
    disk costs the entry only). Returns whether the entry was written."""
    return write_cache(path, sealed(data))


def open_sealed(path: str | os.PathLike, decode: Callable[[bytes], T]) -> T:
    """`decode` of a sealed cache file's payload, its checksum checked first. FileNotFoundError when there is no
    file; CacheCorruptError when it cannot be read, is damaged, or `decode` rejects it (decoders raise on
    contents that do not match their key)."""
    from .errors import CacheCorruptError

    path = Path(path)
    try:
        return decode(unsealed(read_file(path, f"The cache file {path}", CACHE_BYTES, ValueError)))
    except FileNotFoundError:
        raise
    except Exception as exc:  # OS, checksum, zip, json, key and value errors all mean one thing: recompute
        raise CacheCorruptError(f"The cache file {path} is unreadable ({type(exc).__name__}: {exc})") from exc


def read_sealed(path: str | os.PathLike, decode: Callable[[bytes], T]) -> T | None:
    """open_sealed, or None when the file is absent or damaged (logged): the caller recomputes and rewrites it."""
    from .errors import CacheCorruptError

    try:
        return open_sealed(path, decode)
    except FileNotFoundError:
        return None
    except CacheCorruptError as exc:
        log.warning("%s; recomputing.", exc)
        return None


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
    with os.fdopen(open_own(path), "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def open_own(path: str | os.PathLike, append: bool = False) -> int:
    """A descriptor for writing the lock or log file `path` (appending with `append`), created if missing; never
    truncated, and never through a symbolic link (a link there would make the write land in whatever file it
    names)."""
    try:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_APPEND if append else 0), 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, "it is a symbolic link where longviz keeps a file of its own; remove the "
                                       "link", str(path)) from None
        raise


# ------------------------------------------------------------------------------------------------ hashes
def digest(obj, digest_size: int = 16) -> str:
    """A short stable hash of a JSON-able object (cache keys); keys sorted, anything else JSON cannot hold
    written with str()."""
    return bytes_digest(json.dumps(obj, sort_keys=True, default=str).encode(), digest_size)


def bytes_digest(data: bytes, digest_size: int = 16) -> str:
    return hashlib.blake2b(data, digest_size=digest_size).hexdigest()


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


# ------------------------------------------------------------------------------------------------ JSON cache
class JsonStore:
    """One sealed JSON file per key under <cache root>/<kind>/, written by write_cache; an unreadable or damaged
    file counts as missing (and is recomputed)."""

    def __init__(self, kind: str, cache_dir=None) -> None:
        self.root = cache_folder(kind, cache_dir)

    def path(self, key: str) -> Path:
        return self.root / f"{key}.json"

    def get(self, key: str):
        def decode(body: bytes):
            payload = json.loads(body.decode("utf-8"))
            if payload.get("key") != key:
                raise ValueError("key mismatch")
            return payload["value"]

        return read_sealed(self.path(key), decode)

    def put(self, key: str, value) -> None:
        write_sealed(self.path(key), json.dumps({"key": key, "value": value}, allow_nan=True).encode("utf-8"))


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
