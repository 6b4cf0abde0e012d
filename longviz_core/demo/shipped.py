"""The built demos in the cache (`demo`, Longformer; `demo-modernbert`; `demo-decoder`, Qwen3): made once from the
shipped model (or trained), checked against checksums, locked against concurrent builders and restored when damaged.
"""

from __future__ import annotations

import fcntl
import functools
import io
import json
import logging
import os
import shutil
import stat
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .._disk import METADATA_BYTES, atomic_write, bytes_digest, cache_root, file_lock, open_own, read_file
from ..config import DEMO_MODELS as DEMOS
from ..progress import Progress
from .corpus import generate_corpus
from .decoder import DECODER
from .modernbert import MODERNBERT
from .train import DEMO_VERSION, SEED, DemoPaths, build_demo

log = logging.getLogger(__name__)

_COMPLETE = "COMPLETE"

# The trained models and tokenizers ship with the package, one folder per demo (model/ as save_pretrained wrote it,
# metrics.json of the build, CHECKSUMS.json of both), so the first start copies them instead of training for
# minutes. The corpus is regenerated (deterministic, under a second). `benchmarks/demo_build.py --ship` trains and
# writes them.
SHIPPED = Path(__file__).with_name("shipped") / "longformer"
SHIPPED_MODERNBERT = Path(__file__).with_name("shipped") / "modernbert"
SHIPPED_DECODER = Path(__file__).with_name("shipped") / "decoder"
_SHIPPED_SUMS = "CHECKSUMS.json"


@dataclass(frozen=True)
class _Demo:
    folder: str  # its folder in the cache, versioned: demo-4, demo-modernbert-1, demo-decoder-1
    shipped: Path  # its shipped model, tokenizer and metrics
    build: Callable[..., DemoPaths]  # (out_dir, progress) -> the demo trained into out_dir


def _demo(name: str) -> _Demo:
    """The demo called `name`; read from the module's names at each call, so a test can stand in for the shipped
    files or the build."""
    if name == "demo":
        return _Demo(f"demo-{DEMO_VERSION}", SHIPPED, build_demo)
    if name == "demo-modernbert":
        return _Demo(f"demo-modernbert-{MODERNBERT.version}", SHIPPED_MODERNBERT,
                     lambda out_dir, progress: build_demo(out_dir, progress, MODERNBERT))
    if name == "demo-decoder":
        return _Demo(f"demo-decoder-{DECODER.version}", SHIPPED_DECODER,
                     lambda out_dir, progress: build_demo(out_dir, progress, DECODER))
    raise ValueError(f"no demo called {name!r}: {', '.join(DEMOS)}")

# flock excludes other processes; threads of one process each open the lock file and are excluded too,
# this lock only keeps them from racing on mkdir.
_THREAD_LOCK = threading.Lock()


def file_checksums(root: Path, skip: tuple[str, ...] = (_COMPLETE,)) -> dict[str, str]:
    """BLAKE2b of every file under `root` (relative POSIX path -> digest), except the names in `skip`."""
    return {p.relative_to(root).as_posix(): bytes_digest(p.read_bytes())
            for p in sorted(root.rglob("*")) if p.is_file() and p.name not in skip}


# root -> the files' (path, size, mtime_ns, inode, device) when their checksums last matched, in this process.
# Kept only for files last written over _SETTLED_NS before that check began: the kernel stamps writes with a coarse
# clock, so a file written again within the same tick keeps its time (git's "racily clean" entries, the same cure)
_VERIFIED: dict[Path, tuple] = {}
_SETTLED_NS = 2_000_000_000


def _signature(root: Path) -> tuple:
    """What any write, replacement or removal of a file under `root` changes: each file's path, size,
    modification time, inode and device."""
    found = []
    for p in sorted(root.rglob("*")):
        st = p.stat()
        if stat.S_ISREG(st.st_mode):
            found.append((p.relative_to(root).as_posix(), st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev))
    return tuple(found)


def _load_complete(root: Path) -> DemoPaths | None:
    """The demo under `root` if it is complete and every file matches the checksums in its COMPLETE marker;
    None (with a warning naming the damaged files) otherwise. Every page run asks (16 ms of hashing): the
    checksums are read again only when a file's size, time or inode has changed since they last matched."""
    marker = root / _COMPLETE
    if not marker.is_file():
        return None
    began = time.time_ns()
    try:
        signature = _signature(root)
    except OSError:
        signature = None
    if signature is not None and _VERIFIED.get(root) == signature:
        return _paths(root)
    try:
        recorded = _read_json(marker)["files"]
    except (OSError, ValueError, KeyError, TypeError):  # unreadable: the demo is restored
        return None
    try:
        found = file_checksums(root)
    except OSError as exc:
        log.warning("The demo in %s cannot be read (%s); restoring it.", root, exc)
        return None
    damaged = sorted(name for name in set(recorded) | set(found) if recorded.get(name) != found.get(name))
    if damaged:
        log.warning("The demo in %s is damaged (%s differ from the checksums recorded when it was made); "
                    "restoring it.", root, ", ".join(damaged))
        return None
    paths = _paths(root)
    if signature is not None and all(mtime < began - _SETTLED_NS for _, _, mtime, _, _ in signature):
        _VERIFIED[root] = signature
    return paths


def _paths(root: Path) -> DemoPaths:
    metrics = _read_json(root / "metrics.json")
    return DemoPaths(root=root, model_dir=root / "model", dataset_path=root / "dataset.parquet", metrics=metrics)


def _read_json(path: Path):
    """A JSON file of the demo, read within the bound of every metadata file (ValueError when it is not one)."""
    return json.loads(read_file(path, str(path), METADATA_BYTES, ValueError))


def _marker(folder: str, files: dict[str, str]) -> bytes:
    return json.dumps({"version": folder, "files": files}, indent=1, sort_keys=True).encode()


def _shipped_checksums(shipped: Path) -> dict[str, str] | None:
    """The shipped files' checksums when every shipped file matches them; None when the package carries no
    trained demo there or it is damaged."""
    try:
        expected = _read_json(shipped / _SHIPPED_SUMS)
        found = file_checksums(shipped, skip=(_SHIPPED_SUMS, "__pycache__"))
    except (OSError, ValueError):
        return None
    if found != expected:
        log.warning("The demo files shipped in %s do not match their checksums; the demo will be trained.", shipped)
        return None
    return expected


def restore_shipped(out_dir: str | os.PathLike, progress: Progress | None = None,
                    name: str = "demo") -> DemoPaths | None:
    """The demo `name` from its shipped model and tokenizer (copied into out_dir) and the regenerated corpus; None
    when the package carries no intact trained copy of it."""
    shipped = _demo(name).shipped
    if _shipped_checksums(shipped) is None:
        return None
    report = progress or (lambda fraction, message: None)
    out = Path(out_dir)
    report(0.0, "Copying the shipped demo model")
    shutil.copytree(shipped / "model", out / "model")
    shutil.copyfile(shipped / "metrics.json", out / "metrics.json")
    report(0.5, "Writing the demo corpus")
    (out / "dataset.parquet").write_bytes(_corpus_parquet(SEED))
    report(1.0, "Demo ready")
    metrics = _read_json(out / "metrics.json")
    return DemoPaths(root=out, model_dir=out / "model", dataset_path=out / "dataset.parquet", metrics=metrics)


@functools.lru_cache(maxsize=1)
def _corpus_parquet(seed: int) -> bytes:
    """The demo corpus as a parquet file's bytes, generated once per process (1.5 s of CPU): the three demos carry
    the same corpus, and a damaged demo restored again needs it again."""
    out = io.BytesIO()
    generate_corpus(seed=seed).to_parquet(out, index=False)
    return out.getvalue()


def _build_folders(base: Path, folder: str) -> list[Path]:
    return [p for p in base.glob(f".{folder}-build-*") if p.is_dir()]


def _remove_abandoned_builds(base: Path, folder: str, lock_held: bool) -> None:
    """Remove build folders whose builder is gone. Builders hold the build lock for as long as they build,
    so any build folder seen while holding it, or while nobody holds it, was left by a killed builder."""
    folders = _build_folders(base, folder)
    if not folders:
        return
    if lock_held:
        for p in folders:
            shutil.rmtree(p, ignore_errors=True)
        return
    with os.fdopen(open_own(base / f"{folder}.lock"), "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # a build is running: its folder is in use
            return
        try:
            for p in _build_folders(base, folder):
                shutil.rmtree(p, ignore_errors=True)
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


_DEMO_ENTRIES = frozenset({_COMPLETE, "model", "bpe", "dataset.parquet", "metrics.json"})


def _clear_demo_folder(root: Path) -> None:
    """Delete a damaged demo at `root`; a folder there holding anything a demo does not (a result store written
    into it, someone's files) is moved aside to a name beside it instead, with a warning: never deleted."""
    if root.is_symlink() or not root.is_dir() or {p.name for p in root.iterdir()} - _DEMO_ENTRIES:
        kept = root.with_name(f"{root.name}.kept-{int(time.time())}")
        os.rename(root, kept)
        log.warning("%s held files that are not the demo's; moved to %s (nothing deleted).", root, kept)
    else:
        shutil.rmtree(root)


def ensure_demo(cache_dir: str | os.PathLike | None = None, progress: Progress | None = None,
                rebuild: bool = False, name: str = "demo") -> DemoPaths:
    """The cached demo `name` (one of DEMOS; in cache_root(cache_dir) / f"demo-{DEMO_VERSION}" for the Longformer
    demo), made on first use from the shipped model (seconds), or trained (minutes) when the package carries no
    intact one; `rebuild` trains it again and replaces the cached one (`longviz demo --rebuild`).

    Every file is checked against the checksums in the demo's COMPLETE marker when it is opened; a damaged
    demo is made again. Concurrent callers (threads or processes) serialise on a file lock: one makes it, the
    others wait and reuse its result. It is made in a temporary folder renamed into place when complete, so
    an interrupted build never leaves a half-written demo behind, and folders of killed builds are removed.
    """
    demo = _demo(name)
    base = cache_root(cache_dir)
    root = base / demo.folder
    done = None if rebuild else _load_complete(root)
    if done is not None:
        _remove_abandoned_builds(base, demo.folder, lock_held=False)
        return done
    with _THREAD_LOCK:
        base.mkdir(parents=True, exist_ok=True)
    with file_lock(base / f"{demo.folder}.lock"):
        done = None if rebuild else _load_complete(root)  # another builder may have finished while we waited
        if done is not None:
            return done
        _remove_abandoned_builds(base, demo.folder, lock_held=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{demo.folder}-build-", dir=base))
        try:
            if rebuild or restore_shipped(tmp, progress, name) is None:
                demo.build(tmp, progress)
            atomic_write(tmp / _COMPLETE, _marker(demo.folder, file_checksums(tmp)))
            if root.exists():  # a damaged or incomplete directory (e.g. copied by hand)
                _clear_demo_folder(root)
            os.rename(tmp, root)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return _load_complete(root)
