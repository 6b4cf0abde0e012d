"""A unit on disk: the store's folder layout, the Record a unit holds, and a unit's files read back with their
sizes and checksums checked."""
from __future__ import annotations

import errno
import io
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..._disk import bytes_digest
from ...errors import CacheCorruptError, StoreError

FORMAT = 2  # 2: manifests sealed by their checksum, token counts by type and by word, exact flip scans
DOCS, DATASET, INDEX, TMP = "docs", "dataset", "index", "tmp"
META = "meta.json"
_CHECKSUM = "checksum"  # the manifest's own BLAKE2b, over its other keys
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


def write_error(root: Path, what: str, exc: OSError) -> StoreError:
    """A failed write as a StoreError saying what the store holds now and what to do."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        cause = f"the disk holding {root} is full (or the quota is used up)"
    else:
        cause = f"{exc.strerror or exc} ({getattr(exc, 'filename', None) or root})"
    return StoreError(f"Could not write {what} into the store {root}: {cause}. Everything written before is intact; "
                      "free space (or fix the cause) and run the same command again: it resumes where it stopped.")


def unit_dir(root: Path, doc_id: str | None, kind: str) -> Path:
    return root / DATASET / kind if doc_id is None else root / DOCS / doc_id / kind


def check_name(name: str) -> None:
    if not NAME.match(name):
        raise ValueError(f"names of kinds, arrays and tables must match {NAME.pattern}, got {name!r}")


def scan_units(root: Path) -> set[tuple[str, str]]:
    """Every per-document unit on disk, (doc_id, kind), read from the files (the truth), not from an index."""
    units = set()
    docs = root / DOCS
    if not docs.is_dir():
        return units
    with os.scandir(docs) as it:
        for d in it:
            if not (d.is_dir() and DOC_ID.match(d.name)):
                continue
            with os.scandir(d.path) as kinds:
                for k in kinds:
                    if os.path.isfile(os.path.join(k.path, META)):
                        units.add((d.name, k.name))
    return units


def _repair_hint(unit: Path) -> str:
    """The fix for a damaged unit: remove it; the next precompute into the store recomputes exactly it."""
    return f"delete {unit} and run the same `longviz precompute` command again: it recomputes just that unit"


def read_meta(unit: Path) -> dict:
    try:
        meta = json.loads((unit / META).read_text())
        if not all(isinstance(meta.get(k), dict) for k in ("arrays", "tables", "scalars")):
            raise ValueError("arrays, tables or scalars missing")
        return meta
    except (OSError, ValueError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise CacheCorruptError(f"{unit / META} is unreadable ({exc}); {_repair_hint(unit)}.") from exc


def _read_checked(path: Path, info: dict) -> bytes:
    """The file's bytes, its size and BLAKE2b checksum compared with what meta.json recorded at write time."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CacheCorruptError(f"{path} is missing or unreadable ({exc}); {_repair_hint(path.parent)}.") from exc
    if len(data) != info.get("bytes") or bytes_digest(data) != info.get("blake2b"):
        raise CacheCorruptError(f"{path} is damaged (its size or checksum differs from the one recorded in meta.json "
                                f"when it was written); {_repair_hint(path.parent)}.")
    return data


def load_npy(path: Path, info: dict) -> np.ndarray:
    data = _read_checked(path, info)
    try:
        return np.load(io.BytesIO(data), allow_pickle=False)
    except ValueError as exc:
        raise CacheCorruptError(f"{path} is not a plain numeric array ({exc}); {_repair_hint(path.parent)}.") from exc


def load_parquet(path: Path, info: dict) -> pd.DataFrame:
    data = _read_checked(path, info)
    try:
        return pd.read_parquet(io.BytesIO(data))
    except Exception as exc:  # pyarrow raises several types for damaged files
        raise CacheCorruptError(f"{path} is not a readable Parquet file ({exc}); "
                                f"{_repair_hint(path.parent)}.") from exc


def read_unit_tables(root: Path, doc_id: str, kind: str) -> tuple[dict, dict]:
    unit = unit_dir(root, doc_id, kind)
    meta = read_meta(unit)
    tables = {name: load_parquet(unit / f"{name}.parquet", info) for name, info in meta["tables"].items()}
    return meta, tables


def load_unit(root, doc_id: str | None, kind: str) -> Record:
    """One unit's arrays, tables and scalars, straight from its files (doc_id None: a dataset-level unit).

    Every file's size and BLAKE2b checksum (recorded in meta.json when the unit was written) are checked as it
    is read; damage raises CacheCorruptError naming the unit and how to recompute it."""
    unit = unit_dir(Path(root), doc_id, kind)
    if not (unit / META).is_file():
        where = f"document {doc_id}" if doc_id is not None else "the dataset"
        raise StoreError(f"The store has no '{kind}' results for {where}.")
    meta = read_meta(unit)
    arrays = {name: load_npy(unit / f"{name}.npy", info) for name, info in meta["arrays"].items()}
    tables = {name: load_parquet(unit / f"{name}.parquet", info) for name, info in meta["tables"].items()}
    return Record(arrays=arrays, tables=tables, scalars=meta["scalars"])
