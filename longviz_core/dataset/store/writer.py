"""Writing a store: each unit staged, fsync'ed, renamed into place (atomic) and then indexed, by one writer per
process and shard."""
from __future__ import annotations

import fcntl
import io
import json
import os
import shutil
import sqlite3
import uuid
from pathlib import Path

import numpy as np

from ..._disk import bytes_digest, fsync_dir
from ...errors import StoreError
from .index import index_unit, open_writer_index
from .manifest import read_manifest
from .units import (
    DATASET,
    DOC_ID,
    DOCS,
    FORMAT,
    INDEX,
    META,
    NAME,
    TMP,
    Record,
    check_name,
    read_unit_tables,
    unit_dir,
    write_error,
)


class StoreWriter:
    """Writes units into a store and indexes them in its own SQLite file. One per process and shard."""

    def __init__(self, root, writer: str = "main"):
        if not NAME.match(writer):
            raise ValueError(f"writer name must match {NAME.pattern}, got {writer!r}")
        self.root = Path(root)
        if read_manifest(self.root) is None:
            raise StoreError(f"{self.root} has no manifest; open_manifest() first.")
        self.writer = writer
        for sub in (DOCS, DATASET, INDEX, TMP):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        # Held for the writer's lifetime (the kernel drops it when the process dies, even on SIGKILL).
        self._lock = open(self.root / TMP / f"{writer}.lock", "w")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            self._lock.close()
            raise StoreError(f"Another run is already writing '{writer}' into {self.root}; wait until it "
                             "finishes (a run in another session or process).") from exc
        self._stage = self.root / TMP / writer
        shutil.rmtree(self._stage, ignore_errors=True)  # what a killed run of this writer left half-staged
        self._stage.mkdir()
        self.conn = open_writer_index(self.root / INDEX / f"{writer}.sqlite")

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
        return (unit_dir(self.root, doc_id, kind) / META).is_file()

    def indexed(self, doc_id: str, kind: str) -> bool:
        return self.conn.execute("SELECT 1 FROM entries WHERE doc_id=? AND kind=?", (doc_id, kind)).fetchone() is not None

    # ---- writing
    def commit(self, doc_id: str | None, kind: str, record: Record) -> bool:
        """Write one unit atomically (doc_id None: a dataset-level unit): stage its files, publish the staged
        folder (the atomic step), then index it.

        Returns False when the unit already exists (another writer finished it first); nothing changes then."""
        check_name(kind)
        if doc_id is not None and not DOC_ID.match(doc_id):
            raise ValueError(f"bad doc_id {doc_id!r}")
        final = unit_dir(self.root, doc_id, kind)
        if (final / META).is_file():
            return False
        stage = self._stage / f"{doc_id or 'dataset'}-{kind}-{uuid.uuid4().hex[:8]}"
        try:
            meta = self._stage_unit(stage, doc_id, kind, record)
            published = self.publish(stage, final)
        except OSError as exc:  # nothing of the unit is in place: the store is as it was before this commit
            shutil.rmtree(stage, ignore_errors=True)
            raise write_error(self.root, f"the '{kind}' results of {doc_id or 'the dataset'}", exc) from exc
        if not published:
            return False
        if doc_id is not None:
            try:
                index_unit(self.conn, doc_id, kind, meta, record.tables)
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
            check_name(name)
            arr = np.asarray(arr)
            buf = io.BytesIO()
            np.save(buf, arr, allow_pickle=False)  # object arrays fail here: no pickle ever reaches the disk
            meta["arrays"][name] = _write_file(stage / f"{name}.npy", buf.getvalue())
        for name, df in record.tables.items():
            check_name(name)
            buf = io.BytesIO()
            df.reset_index(drop=True).to_parquet(buf, index=False)
            meta["tables"][name] = _write_file(stage / f"{name}.parquet", buf.getvalue())
        _write_file(stage / META, json.dumps(meta, indent=1, sort_keys=True).encode())
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
            if (final / META).is_file():  # lost a race with another writer: theirs stands
                shutil.rmtree(stage, ignore_errors=True)
                return False
            raise
        fsync_dir(final.parent)
        return True

    def index_from_files(self, doc_id: str, kind: str) -> None:
        """Index a unit that is on disk but not in this writer's index (its writer was killed after the rename)."""
        meta, tables = read_unit_tables(self.root, doc_id, kind)
        index_unit(self.conn, doc_id, kind, meta, tables)


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

