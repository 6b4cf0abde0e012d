"""The on-disk result store of the precompute: per-document files as the truth, SQLite files as the index.

Layout of a store directory:

    manifest.json                 model + dataset fingerprints, settings per kind, package versions
    docs/<doc_id>/<kind>/         one unit: meta.json + <name>.npy arrays + <name>.parquet tables
    dataset/<kind>/               dataset-level units (head importance), same format
    index/<writer>.sqlite         one SQLite index per writer (a shard), WAL mode
    tmp/<writer>/                 staging area of a writer (emptied when it starts)

A unit is staged in tmp/, every file fsync'ed, then the directory is renamed into place (atomic on POSIX)
and its parent fsync'ed: a unit exists completely or not at all, whatever moment a writer is killed at.
Only then is it indexed. The reader trusts the files, not the index: units on disk that no index knows
(a writer killed between the rename and the insert) are indexed on the fly in memory, index rows without
files are ignored, and a unit indexed by several writers (the shard count changed between runs) is read
from one of them. So the index can never disagree with what is on disk. A damaged index file is set aside
with a warning and its units are indexed from their files too; the writer that owns it starts it afresh.

Every file's size and BLAKE2b are recorded in its unit's meta.json and checked whenever the file is read (a
store is a lab's shared truth: it must never serve flipped numbers); the manifest carries its own checksum.
A write that fails (a full disk) leaves nothing of its unit behind and is a StoreError saying so.

Why one SQLite file per writer rather than one shared file: shards never contend for a lock, shards on
different machines can write into one shared directory (SQLite's locking and WAL are unsafe on network
file systems when several hosts write one database; here every database has a single writer), and
merging shards needs no step of its own: the reader unions the files.

Arrays are .npy (np.save / np.load with allow_pickle=False), tables Parquet: nothing is ever unpickled.
Every table row of a unit is mirrored into the index table "<kind>__<table>" with a doc_id column, so the
dataset-wide views are SQL queries plus the combining functions of dataset.aggregate: the store's aggregation
methods are the only code that turns per-document results into dataset numbers, whether the store was made by
the command line, by Ray or by the app. Those functions (and the view types) are imported where they are used:
some bring torch (through the views' definitions), and reading a store (`store-info`) needs none of it.
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import io
import json
import logging
import os
import re
import shutil
import sqlite3
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd

from .._disk import atomic_write, bytes_digest, file_lock, fsync_dir
from ..errors import CacheCorruptError, ManifestMismatchError, StoreError

log = logging.getLogger(__name__)

FORMAT = 1
COUNT_TABLES = {"type": "counts", "word": "word_counts"}  # the attention kind's table of each group (ResultStore._counts)
MANIFEST = "manifest.json"
_DOCS, _DATASET, _INDEX, _TMP = "docs", "dataset", "index", "tmp"
_META = "meta.json"
_CHECKSUM = "checksum"  # the manifest's own BLAKE2b, over its other keys
_NAME = re.compile(r"^[a-z][a-z0-9_-]*$")
_DOC_ID = re.compile(r"^[0-9]+$")
# Version keys whose change may change the numbers; a mismatch refuses unless explicitly allowed.
NUMERIC_PACKAGES = ("longviz_core", "torch", "transformers", "captum", "numpy")


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


# ================================================================================================ manifest
def read_manifest(root) -> dict | None:
    """The store's manifest (None when there is none), its checksum checked: a manifest that settings are read
    from must not have changed since it was written (a flipped digit could make a store claim other settings)."""
    path = Path(root) / MANIFEST
    try:
        manifest = json.loads(path.read_text())
        recorded = manifest.pop(_CHECKSUM, None) if isinstance(manifest, dict) else None
        if not isinstance(manifest, dict):
            raise ValueError("not a JSON object")
        if recorded is not None and recorded != _manifest_checksum(manifest):
            raise ValueError("its checksum differs from the one recorded when it was written")
        return manifest
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise CacheCorruptError(f"The store manifest {path} is unreadable or damaged ({exc}); it cannot be trusted. "
                                f"Restore it from a backup, or precompute into a new --out directory.") from exc


def _manifest_checksum(manifest: dict) -> str:
    return bytes_digest(json.dumps(manifest, sort_keys=True).encode())


def manifest_conflicts(old: dict, new: dict, allow_version_change: bool = False) -> list[str]:
    """Human-readable differences that forbid mixing results made under `new` with those under `old`."""
    problems = []
    for section, key in (("model", "fingerprint"), ("dataset", "fingerprint")):
        a, b = old.get(section, {}).get(key), new.get(section, {}).get(key)
        if a != b:
            problems.append(f"{section} fingerprint differs: store {a} ({old.get(section, {}).get('source')}), "
                            f"this run {b} ({new.get(section, {}).get('source')})")
    if old.get("max_tokens") != new.get("max_tokens"):
        problems.append(f"max_tokens differs: store {old.get('max_tokens')}, this run {new.get('max_tokens')}")
    for kind in sorted(set(old.get("kinds", {})) & set(new.get("kinds", {}))):
        a, b = old["kinds"][kind], new["kinds"][kind]
        if a != b:
            diff = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
            problems.append(f"settings of '{kind}' differ ({', '.join(f'{k}: {a.get(k)!r} vs {b.get(k)!r}' for k in diff)})")
    if not allow_version_change:
        va, vb = old.get("versions", {}), new.get("versions", {})
        diff = [k for k in NUMERIC_PACKAGES if va.get(k) != vb.get(k)]
        if diff:
            problems.append("package versions differ (" + ", ".join(f"{k}: {va.get(k)} vs {vb.get(k)}" for k in diff)
                            + "); pass --allow-version-change to accept")
    return problems


def open_manifest(root, manifest: dict, allow_version_change: bool = False) -> dict:
    """Create the store's manifest, or check `manifest` against the existing one and add its new kinds.

    Raises ManifestMismatchError when the results would mix models, datasets or settings. Serialised by a
    file lock so concurrent shards agree on one manifest."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    with file_lock(root / ".manifest.lock"):
        old = read_manifest(root)
        if old is None:
            merged = dict(manifest, format=FORMAT)
        else:
            if old.get("format") != FORMAT:
                raise ManifestMismatchError(f"{root} is a store of format {old.get('format')}, this is {FORMAT}.")
            problems = manifest_conflicts(old, manifest, allow_version_change)
            if problems:
                raise ManifestMismatchError(
                    f"Refusing to mix results in {root}: " + "; ".join(problems)
                    + ". Use another --out directory for these settings."
                )
            merged = dict(old)
            merged["kinds"] = {**old.get("kinds", {}), **manifest.get("kinds", {})}
            if merged == old:
                return old
        try:
            sealed_manifest = {**merged, _CHECKSUM: _manifest_checksum(merged)}
            atomic_write(root / MANIFEST, json.dumps(sealed_manifest, indent=2, sort_keys=True).encode())
        except OSError as exc:
            raise _write_error(root, "the manifest", exc) from exc
        return merged


# ================================================================================================= writing
class StoreWriter:
    """Writes units into a store and indexes them in its own SQLite file. One per process and shard."""

    def __init__(self, root, writer: str = "main"):
        if not _NAME.match(writer):
            raise ValueError(f"writer name must match {_NAME.pattern}, got {writer!r}")
        self.root = Path(root)
        if read_manifest(self.root) is None:
            raise StoreError(f"{self.root} has no manifest; open_manifest() first.")
        self.writer = writer
        for sub in (_DOCS, _DATASET, _INDEX, _TMP):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        # Held for the writer's lifetime (the kernel drops it when the process dies, even on SIGKILL).
        self._lock = open(self.root / _TMP / f"{writer}.lock", "w")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            self._lock.close()
            raise StoreError(f"Another run is already writing '{writer}' into {self.root}; wait until it "
                             "finishes (a run in another session or process).") from exc
        self._stage = self.root / _TMP / writer
        shutil.rmtree(self._stage, ignore_errors=True)  # what a killed run of this writer left half-staged
        self._stage.mkdir()
        self.conn = _open_writer_index(self.root / _INDEX / f"{writer}.sqlite")

    def close(self) -> None:
        self.conn.close()
        shutil.rmtree(self._stage, ignore_errors=True)
        fcntl.flock(self._lock, fcntl.LOCK_UN)
        self._lock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- queries on the files (the truth)
    def exists(self, doc_id: str | None, kind: str) -> bool:
        return (_unit_dir(self.root, doc_id, kind) / _META).is_file()

    def indexed(self, doc_id: str, kind: str) -> bool:
        return self.conn.execute("SELECT 1 FROM entries WHERE doc_id=? AND kind=?", (doc_id, kind)).fetchone() is not None

    # ---- writing
    def commit(self, doc_id: str | None, kind: str, record: Record) -> bool:
        """Write one unit atomically (doc_id None: a dataset-level unit): stage its files, publish the staged
        folder (the atomic step), then index it.

        Returns False when the unit already exists (another writer finished it first); nothing changes then."""
        _check_name(kind)
        if doc_id is not None and not _DOC_ID.match(doc_id):
            raise ValueError(f"bad doc_id {doc_id!r}")
        final = _unit_dir(self.root, doc_id, kind)
        if (final / _META).is_file():
            return False
        stage = self._stage / f"{doc_id or 'dataset'}-{kind}-{uuid.uuid4().hex[:8]}"
        try:
            meta = self._stage_unit(stage, doc_id, kind, record)
            published = self.publish(stage, final)
        except OSError as exc:  # nothing of the unit is in place: the store is as it was before this commit
            shutil.rmtree(stage, ignore_errors=True)
            raise _write_error(self.root, f"the '{kind}' results of {doc_id or 'the dataset'}", exc) from exc
        if not published:
            return False
        if doc_id is not None:
            try:
                _index_unit(self.conn, doc_id, kind, meta, record.tables)
            except sqlite3.OperationalError as exc:  # e.g. "database or disk is full"
                raise StoreError(f"Could not index the '{kind}' results of {doc_id} in the store {self.root} "
                                 f"({exc}); the results themselves are written and readers index them from "
                                 "their files. Free space and run the same command again.") from exc
        return True

    def _stage_unit(self, stage: Path, doc_id: str | None, kind: str, record: Record) -> dict:
        """The unit's files in `stage`, a fresh folder of the staging area, each and the folder fsync'ed; its meta."""
        stage.mkdir()
        meta = {"format": FORMAT, "doc_id": doc_id, "kind": kind, "scalars": _jsonable(record.scalars),
                "arrays": {}, "tables": {}}
        for name, arr in record.arrays.items():
            _check_name(name)
            arr = np.asarray(arr)
            buf = io.BytesIO()
            np.save(buf, arr, allow_pickle=False)  # object arrays fail here: no pickle ever reaches the disk
            meta["arrays"][name] = _write_file(stage / f"{name}.npy", buf.getvalue())
        for name, df in record.tables.items():
            _check_name(name)
            buf = io.BytesIO()
            df.reset_index(drop=True).to_parquet(buf, index=False)
            meta["tables"][name] = _write_file(stage / f"{name}.parquet", buf.getvalue())
        _write_file(stage / _META, json.dumps(meta, indent=1, sort_keys=True).encode())
        fsync_dir(stage)
        return meta

    def publish(self, stage: Path, final: Path) -> bool:
        """Rename a staged unit folder into place (atomic on POSIX) and fsync its parent: from here on the unit
        exists, indexed or not. False when another writer published the unit first (theirs stands)."""
        if not final.parent.is_dir():
            final.parent.mkdir(parents=True, exist_ok=True)
            fsync_dir(final.parent.parent)  # the new docs/<doc_id> entry survives a power cut too
        try:
            os.rename(stage, final)
        except OSError:
            if (final / _META).is_file():  # lost a race with another writer: theirs stands
                shutil.rmtree(stage, ignore_errors=True)
                return False
            raise
        fsync_dir(final.parent)
        return True

    def index_from_files(self, doc_id: str, kind: str) -> None:
        """Index a unit that is on disk but not in this writer's index (its writer was killed after the rename)."""
        meta, tables = _read_unit_tables(self.root, doc_id, kind)
        _index_unit(self.conn, doc_id, kind, meta, tables)


# ================================================================================================= reading
def load_unit(root, doc_id: str | None, kind: str) -> Record:
    """One unit's arrays, tables and scalars, straight from its files (doc_id None: a dataset-level unit).

    Every file's size and BLAKE2b checksum (recorded in meta.json when the unit was written) are checked as it
    is read; damage raises CacheCorruptError naming the unit and how to recompute it."""
    unit = _unit_dir(Path(root), doc_id, kind)
    if not (unit / _META).is_file():
        where = f"document {doc_id}" if doc_id is not None else "the dataset"
        raise StoreError(f"The store has no '{kind}' results for {where}.")
    meta = _read_meta(unit)
    arrays = {name: _load_npy(unit / f"{name}.npy", info) for name, info in meta["arrays"].items()}
    tables = {name: _load_parquet(unit / f"{name}.parquet", info) for name, info in meta["tables"].items()}
    return Record(arrays=arrays, tables=tables, scalars=meta["scalars"])


class ResultStore:
    """Read access to a store: documents, units, and the dataset-wide aggregates the app shows.

    The set of units is read from the files when the store is opened (call refresh() to see newer ones).
    `limit`: read only the first `limit` documents (dataset rows < limit), as the app does for the documents a
    user asked for; every count and aggregate is then over those."""

    def __init__(self, path, limit: int | None = None):
        self.root = Path(path)
        self.limit = None if limit is None else int(limit)
        manifest = read_manifest(self.root)
        if manifest is None:
            raise StoreError(f"{self.root} is not a longviz result store (no {MANIFEST}).")
        self.manifest = manifest
        self._conns: list[tuple[str, sqlite3.Connection]] = []
        self._damaged: set[str] = set()  # index files found damaged: their units are indexed from the files
        self._lock = threading.RLock()  # one store serves every session of the app: queries take turns
        self.refresh()

    # ---- identity
    @property
    def model_fingerprint(self) -> str:
        return self.manifest["model"]["fingerprint"]

    @property
    def dataset_fingerprint(self) -> str:
        return self.manifest["dataset"]["fingerprint"]

    @property
    def max_tokens(self) -> int:
        return int(self.manifest["max_tokens"])

    @property
    def n_documents(self) -> int:
        """Documents in the dataset the store was made for (not all of them need be computed)."""
        return int(self.manifest["dataset"]["n_documents"])

    def settings(self, kind: str) -> dict | None:
        return self.manifest.get("kinds", {}).get(kind)

    def serves(self, kind: str, **settings) -> bool:
        """Whether the store holds `kind` results computed with these settings, e.g.
        serves("agreement", n_steps=50, target="predicted", p=0.99). Each key is looked up in the kind's own
        manifest settings, then in the other kinds' (its dependencies'); lists compare as sets."""
        kinds = self.manifest.get("kinds", {})
        if kind not in kinds or not self.has(kind):
            return False
        for key, want in settings.items():
            owner = next((k for k in [kind, *kinds] if key in kinds[k]), None)
            if owner is None:
                return False
            have = kinds[owner][key]
            if isinstance(have, list) and isinstance(want, (list, tuple, set)):
                if sorted(map(str, have)) != sorted(map(str, want)):
                    return False
            elif have != want and str(have) != str(want):
                return False
        return True

    def matches(self, model_fingerprint: str, dataset_fingerprint: str, max_tokens: int | None = None) -> bool:
        return (self.model_fingerprint == model_fingerprint and self.dataset_fingerprint == dataset_fingerprint
                and (max_tokens is None or self.max_tokens == int(max_tokens)))

    # ---- the set of units
    def refresh(self) -> "ResultStore":
        """Re-read the manifest, the files and the indexes."""
        with self._lock:
            return self._refresh()

    def _refresh(self) -> "ResultStore":
        self.close()
        self.manifest = read_manifest(self.root) or self.manifest
        on_disk = scan_units(self.root)  # {(doc_id, kind)}
        if self.limit is not None:
            on_disk = {(d, k) for d, k in on_disk if int(d) < self.limit}
        owner: dict[tuple[str, str], int] = {}
        for path in sorted((self.root / _INDEX).glob("*.sqlite")):
            if path.stem in self._damaged:
                continue
            try:
                conn = _connect_read(path)
            except sqlite3.DatabaseError as exc:
                self._index_damaged(path.stem, exc)
                continue
            try:
                rows = conn.execute("SELECT doc_id, kind FROM entries").fetchall()
            except sqlite3.OperationalError:  # a writer has created the file but not its tables yet
                conn.close()
                continue
            except sqlite3.DatabaseError as exc:
                conn.close()
                self._index_damaged(path.stem, exc)
                continue
            self._conns.append((path.stem, conn))
            for doc_id, kind in rows:
                if (doc_id, kind) in on_disk:
                    owner.setdefault((doc_id, kind), len(self._conns) - 1)
        orphans = sorted(on_disk - set(owner))
        if orphans:  # units whose writer died before indexing them: index them here, in memory
            mem = sqlite3.connect(":memory:", check_same_thread=False)
            _init_schema(mem)
            for doc_id, kind in orphans:
                meta, tables = _read_unit_tables(self.root, doc_id, kind)
                _index_unit(mem, doc_id, kind, meta, tables)
            self._conns.append(("(files)", mem))
            for key in orphans:
                owner[key] = len(self._conns) - 1
        self._owner = owner
        self._units = on_disk
        return self

    def _index_damaged(self, name: str, exc: Exception) -> None:
        """Stop using a damaged index file; the units it held are indexed from their files (the truth)."""
        self._damaged.add(name)
        log.warning("The store index %s is damaged (%s); indexing its units from the unit files instead. "
                    "The next precompute into the store rebuilds it.", self.root / _INDEX / f"{name}.sqlite", exc)

    def close(self) -> None:
        for _, conn in getattr(self, "_conns", []):
            conn.close()
        self._conns = []

    def doc_ids(self, kind: str) -> list[str]:
        """Documents that have `kind`, sorted."""
        return sorted(d for d, k in self._units if k == kind)

    def count(self, kind: str) -> int:
        return sum(1 for _, k in self._units if k == kind)

    def has(self, kind: str) -> bool:
        """Whether any result of `kind` is stored (a dataset-level kind: whether it is)."""
        return self.count(kind) > 0 or (_unit_dir(self.root, None, kind) / _META).is_file()

    def complete(self, kind: str) -> bool:
        """Whether every document (of the first `limit`, when given) has `kind`."""
        wanted = self.n_documents if self.limit is None else min(self.n_documents, self.limit)
        return self.count(kind) >= wanted

    def content_key(self) -> str:
        """Changes whenever a unit is added: a cache key for aggregates computed from the store."""
        h = hashlib.blake2b(digest_size=12)
        h.update(json.dumps(self.manifest, sort_keys=True).encode())
        for doc_id, kind in sorted(self._units):
            h.update(f"{doc_id}/{kind};".encode())
        for kind in sorted(p.name for p in (self.root / _DATASET).glob("*") if (p / _META).is_file()):
            h.update(f"dataset/{kind};".encode())
        return h.hexdigest()

    # ---- units
    def load(self, doc_id: str | None, kind: str) -> Record:
        """One unit's arrays, tables and scalars (doc_id None: the dataset-level unit of `kind`), checksums
        checked; see load_unit."""
        return load_unit(self.root, doc_id, kind)

    def array(self, doc_id: str | None, kind: str, name: str) -> np.ndarray:
        unit = _unit_dir(self.root, doc_id, kind)
        meta = _read_meta(unit) if (unit / _META).is_file() else None
        if meta is None or name not in meta["arrays"]:
            raise StoreError(f"The store has no array '{name}' of '{kind}' for {doc_id or 'the dataset'}.")
        return _load_npy(unit / f"{name}.npy", meta["arrays"][name])

    def verify(self) -> list[str]:
        """Check every unit's files against their recorded sizes and hashes; returns the problems found."""
        problems = []
        keys = sorted(self._units) + [(None, p.name) for p in sorted((self.root / _DATASET).glob("*"))
                                      if (p / _META).is_file()]
        for doc_id, kind in keys:
            try:
                self.load(doc_id, kind)
            except (CacheCorruptError, StoreError) as exc:
                problems.append(str(exc))
        return problems

    # ---- index queries
    def query(self, kind: str, sql: str, params: tuple = ()) -> pd.DataFrame:
        """Run `sql` on every index with a TEMP table `owned(doc_id)` holding the documents whose `kind` unit
        that index owns, and concatenate the results. Write the query so that rows are restricted with
        `doc_id IN (SELECT doc_id FROM owned)`; combine per-index partial results in the caller."""
        with self._lock:
            while True:
                try:
                    return self._query(kind, sql, params)
                except _DamagedIndex as damaged:  # found damaged only now (e.g. truncated past its first page)
                    self._index_damaged(damaged.name, damaged.__cause__)
                    self._refresh()

    def _query(self, kind: str, sql: str, params: tuple) -> pd.DataFrame:
        frames = []
        for i, (name, conn) in enumerate(self._conns):
            owned = [(d,) for (d, k), o in self._owner.items() if k == kind and o == i]
            if not owned:
                continue
            try:
                conn.execute("DROP TABLE IF EXISTS temp.owned")
                conn.execute("CREATE TEMP TABLE owned(doc_id TEXT PRIMARY KEY)")
                conn.executemany("INSERT INTO temp.owned VALUES (?)", owned)
                frames.append(pd.read_sql_query(sql, conn, params=params))
            except (sqlite3.DatabaseError, pd.errors.DatabaseError) as exc:
                if "no such table" in str(exc):
                    continue
                if name == "(files)" or not _is_damage(exc):
                    raise
                raise _DamagedIndex(name) from exc
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    def table(self, kind: str, name: str) -> pd.DataFrame:
        """All documents' rows of one table of `kind`, with a doc_id column, ordered by document."""
        t = table_name(kind, name)
        df = self.query(kind, f'SELECT * FROM "{t}" WHERE doc_id IN (SELECT doc_id FROM owned)')
        if df.empty:
            return df
        dtypes = self.query(kind, "SELECT col, dtype FROM _columns WHERE tbl = ?", (t,))
        df = _restore_dtypes(df, dict(zip(dtypes["col"], dtypes["dtype"])) if len(dtypes) else {})
        return df.sort_values(["doc_id", "_i"], kind="stable").drop(columns="_i").reset_index(drop=True)

    # ---- dataset-wide views
    def documents(self) -> pd.DataFrame:
        """One row per analysed document: doc_id, row, text_hash, n_tokens, n_text_tokens, truncated, label,
        predicted, prob_<class>..."""
        return self.table("attention", "document")

    def probs(self) -> pd.DataFrame:
        """Predicted class probabilities per analysed document: columns row and prob_<class>."""
        docs = self.documents()
        return docs[["row", *[c for c in docs.columns if c.startswith("prob_")]]] if not docs.empty else docs

    def pooled_attention(self, doc_ids: Iterable[str] | None = None):
        """The dataset-wide heatmap grid as views.pooling.PooledAttention: the mean of the documents'
        relative-position pooled maps, cells (layers, heads, g, g), exactly what pooling.pool_dataset gives."""
        from ..views.pooling import PooledAttention
        from .aggregate import mean_arrays

        ids = list(doc_ids) if doc_ids is not None else self.doc_ids("attention")
        cells = mean_arrays(self.array(d, "attention", "pooled") for d in ids)
        return PooledAttention(cells, np.linspace(0.0, 1.0, cells.shape[-1] + 1), len(ids), relative=True)

    def head_importance(self) -> np.ndarray | None:
        """The dataset-level (layers, heads) head importance, normalised as its method does (the manifest's
        head-importance settings name the method and the normalisation), or None."""
        if not self.has("head-importance"):
            return None
        return self.array(None, "head-importance", "importance")

    def type_counts(self, direction: str = "attended", masked: bool = False) -> pd.DataFrame:
        """Dataset-wide top-k counts by token type (views.counts.dataset_type_counts: per type the sum over
        documents of its paper-rule count, and the documents counting it), from the attention kind's per-document
        tables at the manifest's fixed `counts` settings (k = 10, all layers and heads). masked: the counts with
        the Token counts page's mask (special tokens, non-alphanumeric, stopwords). Columns token, count,
        documents."""
        return self._counts("type", direction, masked)

    def word_counts(self, direction: str = "attended", masked: bool = False) -> pd.DataFrame:
        """As `type_counts`, by word (views.counts' "By word"): columns word, count, documents. Stores made before
        the counts by word hold none (StoreError)."""
        return self._counts("word", direction, masked)

    def _counts(self, group: str, direction: str, masked: bool) -> pd.DataFrame:
        from ..views.counts import DIRECTIONS, GROUP_COLUMNS, dataset_type_counts

        if direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
        counts = (self.settings("attention") or {}).get("counts")
        # a store made before the counts by word names no groups: it holds the counts by type alone
        if counts is None or group not in counts.get("groups", ("type",)):
            held = "no token counts" if counts is None else "no token counts by word"
            raise StoreError(f"The attention results in {self.root} hold {held} (made by an earlier version); "
                             "precompute them again into a new store.")
        if self.count("attention") == 0:
            raise StoreError("The store has no attention results.")
        t = table_name("attention", COUNT_TABLES[group])
        column = GROUP_COLUMNS[group]
        # per index: each group's sum, documents and first appearance (document, row), so ties keep the order
        # in which the groups first appear in the documents' tables, however the documents are sharded
        partial = self.query("attention", f'SELECT "{column}", SUM("count") AS "count", COUNT(*) AS documents, '
                             f"MIN(doc_id || printf('%09d', _i)) AS first FROM \"{t}\" WHERE doc_id IN "
                             f'(SELECT doc_id FROM owned) AND direction = ? AND masked = ? GROUP BY "{column}"',
                             (direction, int(bool(masked))))
        if partial.empty:
            return dataset_type_counts([pd.DataFrame({column: pd.Series(dtype=object),
                                                      "count": pd.Series(dtype=np.int64)})])
        first = partial.groupby(column)["first"].transform("min")
        partial = partial.assign(first=first).sort_values(["first", column], kind="stable")
        return dataset_type_counts([partial[[column, "count", "documents"]]])

    def attribution_by_token_type(self, target: int | None = None, masked: bool = False,
                                  min_docs: int = 1) -> pd.DataFrame:
        """Dataset-wide attribution by token type (Fig 10e/f) over every document with an attribution unit,
        see `aggregate.combine_token_sums`.

        target: the class the attributions should explain; None takes them as stored. A store whose IG
        explains each document's predicted class serves either class of a binary classifier: IG of the other
        class is the negation (p0 = 1 - p1), so those documents' sums change sign. masked=True leaves out
        the instances views.masking.build_mask masks (special, non-alphanumeric, stopwords); min_docs hides
        types found in fewer documents."""
        from .aggregate import combine_token_sums

        value, count = ("attribution_unmasked", "count_unmasked") if masked else ("attribution", "count")
        t, s = table_name("attribution", "by_token"), table_name("attribution", "summary")
        params: tuple = ()
        signed = f"b.{value}"
        if target is not None:
            targets = set(self.query("attribution", f'SELECT DISTINCT target FROM "{s}" '
                                     f'WHERE doc_id IN (SELECT doc_id FROM owned)')["target"].astype(int))
            if targets - {int(target)} and len(self.manifest["model"].get("id2label", {})) != 2:
                raise StoreError(f"The store's attributions explain classes {sorted(targets)}, not {target}; "
                                 f"precompute with --target {target}.")
            signed, params = f"CASE WHEN s.target = ? THEN b.{value} ELSE -b.{value} END", (int(target),)
        partial = self.query("attribution", f'SELECT b.token AS token, SUM({signed}) AS total_attribution, '
                             f'COUNT(DISTINCT b.doc_id) AS n_docs, SUM(b.{count}) AS occurrences FROM "{t}" b '
                             f'JOIN "{s}" s ON s.doc_id = b.doc_id WHERE b.doc_id IN (SELECT doc_id FROM owned) '
                             f'AND b.{count} > 0 GROUP BY b.token', params)
        n = self.count("attribution")
        if n == 0:
            raise StoreError("The store has no attribution results.")
        return combine_token_sums(partial, n, min_docs)

    def dataset_attributions(self, target: int, masked: bool = False, min_docs: int = 1):
        """The dataset-wide attribution table for class `target` as a DatasetAttribution (see
        attribution_by_token_type)."""
        from .aggregate import DatasetAttribution

        table = self.attribution_by_token_type(target, masked, min_docs)
        return DatasetAttribution(table, int(target), int(self.settings("attribution")["n_steps"]),
                                  self.count("attribution"), f"store:{self.content_key()}", masked=bool(masked),
                                  min_docs=int(min_docs), from_cache=True)

    def head_agreement(self, metric: str = "rbo", masked: str = "no") -> np.ndarray:
        """Mean over documents of every head's agreement (layers, heads); NaN values (dead heads) skipped."""
        from .aggregate import combine_head_means

        t = table_name("agreement", "heads")
        partial = self.query("agreement", f'SELECT layer, head, SUM(value) AS total, COUNT(value) AS n FROM "{t}" '
                             f'WHERE doc_id IN (SELECT doc_id FROM owned) AND metric = ? AND masked = ? '
                             f'GROUP BY layer, head', (metric, masked))
        model = self.manifest["model"]
        return combine_head_means(partial, model["num_layers"], model["num_heads"])

    def top_set_counts(self, source: str, scaled: bool, masked: str) -> pd.DataFrame:
        """Token types in the top-5 % sets summed over documents for one configuration: token, attention only,
        attribution only, both, total (descending)."""
        from .aggregate import combine_set_counts

        t = table_name("agreement", "sets")
        partial = self.query("agreement", f'SELECT token, SUM(attention_only) AS a, SUM(attribution_only) AS b, '
                             f'SUM(both) AS c FROM "{t}" WHERE doc_id IN (SELECT doc_id FROM owned) AND source = ? '
                             f'AND scaled = ? AND masked = ? GROUP BY token', (source, int(bool(scaled)), masked))
        return combine_set_counts(partial)

    def dataset_agreement(self):
        """Tables 1-2, the per-head grids and the top-set counts over the documents, for the configuration the
        store was made with (its manifest's agreement settings: p, top, mask kinds, layer range), as a
        DatasetAgreement: Tables 1-2 by summarise_agreement, per-head grids and top-set counts summed in SQL."""
        from .aggregate import DatasetAgreement, summarise_agreement, with_doc

        rows = self.table("agreement", "rows")
        if rows.empty:
            raise StoreError("The store has no agreement results.")
        grids = self.query("agreement", f'SELECT DISTINCT metric, masked FROM "{table_name("agreement", "heads")}"'
                           ' WHERE doc_id IN (SELECT doc_id FROM owned)')
        configs = self.query("agreement", f'SELECT DISTINCT source, scaled, masked FROM '
                             f'"{table_name("agreement", "sets")}" WHERE doc_id IN (SELECT doc_id FROM owned)')
        n = rows["doc_id"].nunique()
        return DatasetAgreement(
            per_document=with_doc(rows),
            table=summarise_agreement(rows),
            head_grids={(m, k): self.head_agreement(m, k) for m, k in
                        sorted(set(grids.itertuples(index=False, name=None)))},
            set_counts={(src, bool(sc), k): self.top_set_counts(src, bool(sc), k) for src, sc, k in
                        sorted(set(configs.itertuples(index=False, name=None)))},
            n_documents=n, from_cache=n,
        )

    def dataset_faithfulness(self):
        """The faithfulness summary over the documents for the settings the store was made with (its manifest's
        faithfulness settings: rankings, ks, replacement, seeds, scan limit, attention layers and scaling), as a
        DatasetFaithfulness: per ranking the mean and sd over documents (summarise_faithfulness)."""
        from .aggregate import DatasetFaithfulness, summarise_faithfulness, with_doc

        rows = self.table("faithfulness", "rows")
        if rows.empty:
            raise StoreError("The store has no faithfulness results.")
        settings = self.settings("faithfulness") or {}
        if "seeds" not in settings:
            raise StoreError(f"The faithfulness results in {self.root} were made by an earlier version (one random "
                             "seed, a grid search for flips that could miss the first one); precompute them again.")
        ks = tuple(settings["ks"])
        docs = self.documents()
        labels = dict(zip(docs["doc_id"], docs["label"])) if not docs.empty else {}
        per_doc = with_doc(rows)
        per_doc.insert(1, "label", [labels.get(d) for d in rows["doc_id"]])
        n = rows["doc_id"].nunique()
        return DatasetFaithfulness(per_doc, summarise_faithfulness(per_doc, ks), n, n, ks)

    def leaderboard_runs(self) -> pd.DataFrame:
        """Every document's explainer leaderboard runs (dataset.leaderboard.run_columns at the store's ks) with the
        dataset row `doc` first: what dataset.leaderboard.summarise, curves and flips take. The runs were made
        with the settings in the manifest's leaderboard entry."""
        from .aggregate import with_doc

        rows = self.table("leaderboard", "runs")
        if rows.empty:
            raise StoreError("The store has no leaderboard results.")
        return with_doc(rows)


# ================================================================================================== workers
def _write_error(root: Path, what: str, exc: OSError) -> StoreError:
    """A failed write as a StoreError saying what the store holds now and what to do."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        cause = f"the disk holding {root} is full (or the quota is used up)"
    else:
        cause = f"{exc.strerror or exc} ({getattr(exc, 'filename', None) or root})"
    return StoreError(f"Could not write {what} into the store {root}: {cause}. Everything written before is intact; "
                      "free space (or fix the cause) and run the same command again: it resumes where it stopped.")


def _unit_dir(root: Path, doc_id: str | None, kind: str) -> Path:
    return root / _DATASET / kind if doc_id is None else root / _DOCS / doc_id / kind


def _check_name(name: str) -> None:
    if not _NAME.match(name):
        raise ValueError(f"names of kinds, arrays and tables must match {_NAME.pattern}, got {name!r}")


def scan_units(root: Path) -> set[tuple[str, str]]:
    """Every per-document unit on disk, (doc_id, kind), read from the files (the truth), not from an index."""
    units = set()
    docs = root / _DOCS
    if not docs.is_dir():
        return units
    with os.scandir(docs) as it:
        for d in it:
            if not (d.is_dir() and _DOC_ID.match(d.name)):
                continue
            with os.scandir(d.path) as kinds:
                for k in kinds:
                    if os.path.isfile(os.path.join(k.path, _META)):
                        units.add((d.name, k.name))
    return units


def _write_file(path: Path, data: bytes) -> dict:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return {"bytes": len(data), "blake2b": bytes_digest(data)}


def _jsonable(d: dict) -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, np.generic):
            v = v.item()
        if isinstance(v, float) and not np.isfinite(v):
            v = None if np.isnan(v) else str(v)
        out[str(k)] = v
    return json.loads(json.dumps(out))  # raises here, not later, on anything JSON cannot hold


def _repair_hint(unit: Path) -> str:
    """The fix for a damaged unit: remove it; the next precompute into the store recomputes exactly it."""
    return f"delete {unit} and run the same `longviz precompute` command again: it recomputes just that unit"


def _read_meta(unit: Path) -> dict:
    try:
        meta = json.loads((unit / _META).read_text())
        if not all(isinstance(meta.get(k), dict) for k in ("arrays", "tables", "scalars")):
            raise ValueError("arrays, tables or scalars missing")
        return meta
    except (OSError, ValueError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise CacheCorruptError(f"{unit / _META} is unreadable ({exc}); {_repair_hint(unit)}.") from exc


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


def _load_npy(path: Path, info: dict) -> np.ndarray:
    data = _read_checked(path, info)
    try:
        return np.load(io.BytesIO(data), allow_pickle=False)
    except ValueError as exc:
        raise CacheCorruptError(f"{path} is not a plain numeric array ({exc}); {_repair_hint(path.parent)}.") from exc


def _load_parquet(path: Path, info: dict) -> pd.DataFrame:
    data = _read_checked(path, info)
    try:
        return pd.read_parquet(io.BytesIO(data))
    except Exception as exc:  # pyarrow raises several types for damaged files
        raise CacheCorruptError(f"{path} is not a readable Parquet file ({exc}); "
                                f"{_repair_hint(path.parent)}.") from exc


def _read_unit_tables(root: Path, doc_id: str, kind: str) -> tuple[dict, dict]:
    unit = _unit_dir(root, doc_id, kind)
    meta = _read_meta(unit)
    tables = {name: _load_parquet(unit / f"{name}.parquet", info) for name, info in meta["tables"].items()}
    return meta, tables


# ---- SQLite
class _DamagedIndex(Exception):
    """Raised inside ResultStore.query when an index file turns out damaged only while it is queried."""

    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


def _is_damage(exc: Exception) -> bool:
    """Whether an SQLite error means a damaged file (rather than a bad query)."""
    cause = exc if isinstance(exc, sqlite3.DatabaseError) else exc.__cause__ or exc.__context__
    if any(s in str(exc) for s in ("malformed", "not a database")):
        return True
    return isinstance(cause, sqlite3.DatabaseError) and not isinstance(cause, sqlite3.OperationalError)


def _open_writer_index(path: Path) -> sqlite3.Connection:
    """The writer's own index, schema ready. A damaged one (truncated, overwritten) is removed with a warning
    and started afresh: the unit files are the truth; the run re-indexes the units of its rows as it passes
    them, and readers index any other unit from its files."""
    conn = None
    try:
        conn = _connect(path)
        _init_schema(conn)
        if conn.execute("PRAGMA quick_check(1)").fetchone()[0] != "ok":
            raise sqlite3.DatabaseError("database disk image is malformed (quick_check)")
        return conn
    except sqlite3.DatabaseError as exc:
        if not _is_damage(exc):
            raise
        log.warning("The store index %s is damaged (%s); rebuilding it from the unit files.", path, exc)
        if conn is not None:
            conn.close()
        for p in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            p.unlink(missing_ok=True)
    conn = _connect(path)
    _init_schema(conn)
    return conn


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=60, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")  # readers (the app) never block the writer and vice versa
    conn.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL survives process kills; the files are the truth
    return conn


def _connect_read(path: Path) -> sqlite3.Connection:
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=60, check_same_thread=False)
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return conn
    except sqlite3.OperationalError as exc:  # a read-only directory cannot hold WAL's shared-memory file
        if _is_damage(exc):
            raise
        conn = sqlite3.connect(f"file:{path}?immutable=1", uri=True, check_same_thread=False)
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return conn


def _init_schema(conn: sqlite3.Connection) -> None:
    with conn:
        conn.execute("CREATE TABLE IF NOT EXISTS entries(doc_id TEXT NOT NULL, kind TEXT NOT NULL, scalars TEXT, "
                      "PRIMARY KEY (doc_id, kind))")
        conn.execute("CREATE TABLE IF NOT EXISTS _columns(tbl TEXT NOT NULL, col TEXT NOT NULL, dtype TEXT NOT NULL, "
                      "PRIMARY KEY (tbl, col))")


_SQL_TYPES = {"i": "INTEGER", "u": "INTEGER", "b": "INTEGER", "f": "REAL"}


def _index_unit(conn: sqlite3.Connection, doc_id: str, kind: str, meta: dict, tables: dict) -> None:
    """Mirror one unit into the index in a single transaction (replacing whatever it held for the unit)."""
    with conn:
        for name, df in tables.items():
            t = table_name(kind, name)
            cols = [str(c) for c in df.columns]
            _ensure_table(conn, t, df)
            conn.execute(f'DELETE FROM "{t}" WHERE doc_id = ?', (doc_id,))
            if len(df):
                values = df.astype(object).where(df.notna(), None).to_numpy().tolist()
                rows = [(doc_id, i, *(_py(v) for v in row)) for i, row in enumerate(values)]
                names = ", ".join(f'"{c}"' for c in ["doc_id", "_i", *cols])
                conn.executemany(f'INSERT INTO "{t}" ({names}) VALUES ({", ".join("?" * (len(cols) + 2))})', rows)
        conn.execute("INSERT OR REPLACE INTO entries VALUES (?, ?, ?)", (doc_id, kind, json.dumps(meta["scalars"])))


def _ensure_table(conn: sqlite3.Connection, t: str, df: pd.DataFrame) -> None:
    existing = {r[1] for r in conn.execute(f'PRAGMA table_info("{t}")')}
    if not existing:
        conn.execute(f'CREATE TABLE "{t}" (doc_id TEXT NOT NULL, _i INTEGER NOT NULL)')
        conn.execute(f'CREATE INDEX "{t}__doc" ON "{t}" (doc_id)')
        existing = {"doc_id", "_i"}
    for c in df.columns:  # a later document may bring a new column (e.g. a metric added to a kind)
        if str(c) not in existing:
            conn.execute(f'ALTER TABLE "{t}" ADD COLUMN "{c}" {_SQL_TYPES.get(df[c].dtype.kind, "TEXT")}')
            # SQLite keeps no booleans or nullable integers: remember the pandas dtype to restore it
            conn.execute("INSERT OR REPLACE INTO _columns VALUES (?, ?, ?)", (t, str(c), str(df[c].dtype)))


def _restore_dtypes(df: pd.DataFrame, dtypes: dict) -> pd.DataFrame:
    for col, dtype in dtypes.items():
        if col not in df or dtype not in ("bool", "boolean", "Int64", "int64", "int32", "float64", "float32"):
            continue
        if dtype in ("bool", "int64", "int32") and df[col].isna().any():
            dtype = "boolean" if dtype == "bool" else "Int64"
        df[col] = df[col].astype(dtype)
    return df


def _py(v):
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and np.isnan(v):
        return None
    return v
