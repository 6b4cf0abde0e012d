"""A unit on disk: the store's folder layout (its own folders only, never a symbolic link), the Record a unit holds,
and a unit's files read back with their sizes, checksums and identity (the store it was computed in) checked."""
from __future__ import annotations

import io
import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..._disk import METADATA_BYTES, bytes_digest, read_file
from ...errors import CacheCorruptError, StoreError
from .manifest import identity_fault, read_manifest, unit_identity

DOCS, DATASET, INDEX, TMP, LOG = "docs", "dataset", "index", "tmp", "log"
META = "meta.json"
NAME = re.compile(r"^[a-z][a-z0-9_-]*$")
DOC_ID = re.compile(r"^[0-9]+$")


@dataclass(frozen=True)
class Record:
    """One stored unit: the results of one kind for one document (or for the whole dataset)."""

    arrays: dict = field(default_factory=dict)  # name -> np.ndarray, saved as <name>.npy
    tables: dict = field(default_factory=dict)  # name -> pd.DataFrame, saved as <name>.parquet and indexed
    scalars: dict = field(default_factory=dict)  # JSON-able numbers and strings, kept in meta.json


def doc_id_of(row: int) -> str:
    """The id of the dataset's row `row` (the manifest pins the dataset, so a row index is a stable id)."""
    if int(row) < 0:
        raise ValueError(f"row must be >= 0, got {row}")
    return f"{int(row):07d}"


def table_name(kind: str, table: str) -> str:
    return f"{kind}__{table}".replace("-", "_")


def text_digest(text: str) -> str:
    """What a document's unit records of its text (the row's content, beside the dataset's fingerprint)."""
    return bytes_digest(str(text).encode("utf-8", "surrogatepass"))


def unit_dir(root: Path, doc_id: str | None, kind: str) -> Path:
    return root / DATASET / kind if doc_id is None else root / DOCS / doc_id / kind


def check_name(name: str) -> None:
    if not NAME.match(name):
        raise ValueError(f"names of kinds, arrays and tables must match {NAME.pattern}, got {name!r}")


# ---- the store's own folders
def is_link(path: Path) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except OSError:
        return False


def link_problem(path: Path) -> str:
    """What a symbolic link inside a store means and the fix that works (removing the link touches nothing it
    points to; the precompute then writes the store's own results in its place)."""
    return (f"{path} is a symbolic link: a store serves only its own files, so what it points to is not read. "
            f"Remove the link (rm {path}) and run the same `longviz precompute` command again: it computes "
            "what the link stood for")


def own_path(root: Path, path: Path) -> Path:
    """`path` (below the store's root) when none of the folders from the root down to it, nor it, is a symbolic link
    or in the way as another kind of file; CacheCorruptError naming the link (and its fix) otherwise. Missing
    parts are fine: the caller finds nothing there."""
    p = root
    for part in path.relative_to(root).parts:
        p = p / part
        try:
            mode = os.lstat(p).st_mode
        except FileNotFoundError:
            return path
        except OSError as exc:
            raise CacheCorruptError(f"{p} cannot be read ({exc.strerror or exc}); fix its permissions.") from None
        if stat.S_ISLNK(mode):
            raise CacheCorruptError(link_problem(p) + ".")
        if p != path and not stat.S_ISDIR(mode):
            raise CacheCorruptError(f"{p} is a file where the store keeps a folder; {_repair_hint(p)}.")
    return path


def unit_present(root: Path, doc_id: str | None, kind: str) -> bool:
    """Whether a unit folder with its meta.json (a regular file) is on disk, through the store's own folders only."""
    unit = unit_dir(root, doc_id, kind)
    try:
        own_path(root, unit / META)
        return stat.S_ISREG(os.lstat(unit / META).st_mode)
    except (CacheCorruptError, OSError):
        return False


def scan_store(root: Path) -> tuple[set[tuple[str, str]], set[str], list[str]]:
    """The units on disk, read from the files (the truth), not from an index: (per-document units as (doc_id,
    kind), dataset-level kinds, problems). Symbolic links are never followed; every entry that is not a unit
    the store can read (a link, a file, a folder without meta.json or whose meta.json is no file) is a problem
    naming it and its fix."""
    units, dataset, problems = set(), set(), []
    for top in (DOCS, DATASET):
        base = root / top
        if is_link(base):
            problems.append(link_problem(base))
            continue
        if not base.is_dir():
            continue
        for entry in _entries(base, problems):
            if top == DATASET:
                if _unit_folder(entry, problems):
                    dataset.add(entry.name)
                continue
            if entry.is_symlink():
                problems.append(link_problem(Path(entry.path)))
            elif not (entry.is_dir(follow_symlinks=False) and DOC_ID.match(entry.name)):
                problems.append(f"{entry.path} is not a document folder of this store (docs/<row>); remove it")
            else:
                units.update((entry.name, k.name) for k in _entries(Path(entry.path), problems)
                             if _unit_folder(k, problems))
    return units, dataset, problems


def scan_units(root: Path) -> set[tuple[str, str]]:
    """Every per-document unit on disk, (doc_id, kind) (see scan_store)."""
    return scan_store(root)[0]


def _entries(folder: Path, problems: list[str]) -> list[os.DirEntry]:
    try:
        with os.scandir(folder) as it:
            return sorted(it, key=lambda e: e.name)
    except OSError as exc:
        problems.append(f"{folder} cannot be read ({exc.strerror or exc}); fix its permissions")
        return []


def _unit_folder(entry: os.DirEntry, problems: list[str]) -> bool:
    """Whether `entry` is a unit folder with a meta.json file; a problem recorded when it is something else."""
    path = Path(entry.path)
    if entry.is_symlink():
        problems.append(link_problem(path))
    elif not (entry.is_dir(follow_symlinks=False) and NAME.match(entry.name)):
        problems.append(f"{path} is not a unit folder of this store (<kind>/meta.json); {_repair_hint(path)}")
    else:
        try:
            mode = os.lstat(path / META).st_mode
        except FileNotFoundError:
            problems.append(f"{path} has no {META}, so its results cannot be checked; {_repair_hint(path)}")
            return False
        except OSError as exc:
            problems.append(f"{path / META} cannot be read ({exc.strerror or exc}); {_repair_hint(path)}")
            return False
        if stat.S_ISLNK(mode):
            problems.append(link_problem(path / META))
        elif not stat.S_ISREG(mode):
            problems.append(f"{path / META} is not a file; {_repair_hint(path)}")
        else:
            return True
    return False


# ---- reading a unit
def _repair_hint(unit: Path) -> str:
    """The fix for a damaged unit: remove it; the next precompute into the store recomputes exactly it."""
    return f"delete {unit} and run the same `longviz precompute` command again: it recomputes just that unit"


def read_meta(root: Path, doc_id: str | None, kind: str, expected: dict | None = None) -> dict:
    """The unit's meta.json, checked: a regular file (not a link, within the store's own folders) of bounded size,
    of this unit (its doc_id and kind) and of this store: its identity matches `expected` (unit_identity of the
    store's manifest; read from the store when None, and read again once when it does not match, in case another
    run added kinds to the manifest since). StoreError when there is no such unit, CacheCorruptError otherwise."""
    unit = own_path(root, unit_dir(root, doc_id, kind))
    path = own_path(root, unit / META)
    try:
        meta = json.loads(read_file(path, "it", METADATA_BYTES, ValueError, links=False))
        _check_meta(meta, doc_id, kind)
    except FileNotFoundError:
        if unit.is_dir():
            raise CacheCorruptError(f"{unit} has no {META}, so its results cannot be checked; "
                                    f"{_repair_hint(unit)}.") from None
        where = f"document {doc_id}" if doc_id is not None else "the dataset"
        raise StoreError(f"The store has no '{kind}' results for {where}.") from None
    except (OSError, ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise CacheCorruptError(f"{path} is unreadable ({str(exc).rstrip('.')}); {_repair_hint(unit)}.") from exc
    fault = identity_fault(meta.get("identity"), _expected(root, expected))
    if fault and expected is not None:
        fault = identity_fault(meta.get("identity"), _expected(root, None))
    if fault:
        raise CacheCorruptError(f"{unit} holds results that are not this store's: {fault}. They are not served; "
                                f"{_repair_hint(unit)}.")
    return meta


def _expected(root: Path, expected: dict | None) -> dict:
    if expected is not None:
        return expected
    manifest = read_manifest(root)
    if manifest is None:
        raise StoreError(f"{root} is not a longviz result store (it has no manifest).")
    return unit_identity(manifest)


def _check_meta(meta, doc_id: str | None, kind: str) -> None:
    """ValueError unless `meta` is the meta.json of this unit with well-formed entries (file names are checked
    too: they become paths)."""
    if not isinstance(meta, dict) or not all(isinstance(meta.get(k), dict) for k in ("arrays", "tables", "scalars")):
        raise ValueError("arrays, tables or scalars missing")
    if meta.get("doc_id") != doc_id or meta.get("kind") != kind:
        raise ValueError(f"it describes the '{meta.get('kind')}' unit of {meta.get('doc_id') or 'the dataset'}, "
                         "not this one")
    for name, info in [*meta["arrays"].items(), *meta["tables"].items()]:
        if not (NAME.match(name) and isinstance(info, dict) and type(info.get("bytes")) is int
                and info["bytes"] >= 0 and isinstance(info.get("blake2b"), str)):
            raise ValueError(f"its entry for the file '{name}' is malformed")


def _read_checked(root: Path, path: Path, info: dict) -> bytes:
    """The file's bytes, its size and BLAKE2b checksum compared with what meta.json recorded at write time (read
    no further than that size, never through a link)."""
    try:
        data = read_file(own_path(root, path), str(path), info["bytes"], CacheCorruptError,
                         fix=_repair_hint(path.parent), links=False)
    except FileNotFoundError as exc:
        raise CacheCorruptError(f"{path} is missing ({exc.strerror}); {_repair_hint(path.parent)}.") from None
    if len(data) != info.get("bytes") or bytes_digest(data) != info.get("blake2b"):
        raise CacheCorruptError(f"{path} is damaged (its size or checksum differs from the one recorded in meta.json "
                                f"when it was written); {_repair_hint(path.parent)}.")
    return data


def load_npy(root: Path, path: Path, info: dict) -> np.ndarray:
    data = _read_checked(root, path, info)
    try:
        return np.load(io.BytesIO(data), allow_pickle=False)
    except ValueError as exc:
        raise CacheCorruptError(f"{path} is not a plain numeric array ({exc}); {_repair_hint(path.parent)}.") from exc


def load_parquet(root: Path, path: Path, info: dict) -> pd.DataFrame:
    data = _read_checked(root, path, info)
    try:
        return pd.read_parquet(io.BytesIO(data))
    except Exception as exc:  # pyarrow raises several types for damaged files
        raise CacheCorruptError(f"{path} is not a readable Parquet file ({exc}); "
                                f"{_repair_hint(path.parent)}.") from exc


def read_unit_tables(root: Path, doc_id: str, kind: str, expected: dict | None = None) -> tuple[dict, dict]:
    unit = unit_dir(root, doc_id, kind)
    meta = read_meta(root, doc_id, kind, expected)
    tables = {name: load_parquet(root, unit / f"{name}.parquet", info) for name, info in meta["tables"].items()}
    return meta, tables


def load_unit(root, doc_id: str | None, kind: str, expected: dict | None = None) -> Record:
    """One unit's arrays, tables and scalars, straight from its files (doc_id None: a dataset-level unit).

    Its meta.json is checked to be this store's (read_meta; `expected` as there), and every file's size and
    BLAKE2b checksum (recorded in meta.json when the unit was written) as it is read; a unit of another store or
    damage raises CacheCorruptError naming the unit and how to recompute it, a missing unit StoreError."""
    root = Path(root)
    unit = unit_dir(root, doc_id, kind)
    meta = read_meta(root, doc_id, kind, expected)
    arrays = {name: load_npy(root, unit / f"{name}.npy", info) for name, info in meta["arrays"].items()}
    tables = {name: load_parquet(root, unit / f"{name}.parquet", info) for name, info in meta["tables"].items()}
    return Record(arrays=arrays, tables=tables, scalars=meta["scalars"])
