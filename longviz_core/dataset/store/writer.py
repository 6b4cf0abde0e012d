"""Writing a store: each unit staged, fsync'ed, renamed into place (atomic) and then indexed, by one writer per
process and shard; a unit folder that is not this store's (damaged, of another store, a link) is replaced."""
from __future__ import annotations

import fcntl
import io
import json
import os
import shutil
import sqlite3
import stat
import time
import uuid
from pathlib import Path

import numpy as np

from ..._disk import bytes_digest, fsync_dir, open_own
from ...errors import LongvizError, StoreError
from ...progress import Progress, report
from .index import index_unit, indexed_identity, open_writer_index
from .manifest import FORMAT, read_manifest, unit_identity, write_error
from .units import (
    DATASET,
    DOC_ID,
    DOCS,
    INDEX,
    META,
    NAME,
    TMP,
    Record,
    check_name,
    is_link,
    link_problem,
    read_meta,
    read_unit_tables,
    text_digest,
    unit_dir,
)

# How often a writer waiting for another's lock tries again (StoreWriter's wait).
_WAIT_POLL_S = 0.2


class StoreWriter:
    """Writes units into a store and indexes them in its own SQLite file. One per process and shard."""

    def __init__(self, root, writer: str = "main", wait: bool = False, progress: Progress | None = None):
        """`wait`: where another process or session holds this writer's lock, wait for it (False: refuse, with a
        StoreError, as the command line does); `progress` is told it waits, every poll, and may end the wait by
        raising (the app's Stop button). The app's in-process runs wait: two sessions asking for one dataset's
        result at once (a lab's users, or one user's two tabs) then share one computation, the second reading
        what the first wrote instead of an error."""
        if not NAME.match(writer):
            raise ValueError(f"writer name must match {NAME.pattern}, got {writer!r}")
        self.root = Path(root)
        manifest = read_manifest(self.root)
        if manifest is None:
            raise StoreError(f"{self.root} has no manifest; open_manifest() first.")
        self.identity = unit_identity(manifest)  # what every unit this writer commits records (units.read_meta)
        self.writer = writer
        for sub in (DOCS, DATASET, INDEX, TMP):
            if is_link(self.root / sub):  # written through, the store's results would land in another folder
                raise StoreError(link_problem(self.root / sub) + ".")
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        # Held for the writer's lifetime (the kernel drops it when the process dies, even on SIGKILL).
        self._lock = os.fdopen(open_own(self.root / TMP / f"{writer}.lock"), "w")
        while True:
            try:
                fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError as exc:
                if not wait:
                    self._lock.close()
                    raise StoreError(f"Another run is already writing '{writer}' into {self.root}; wait until it "
                                     "finishes (a run in another session or process).") from exc
            try:
                report(progress, 0.0, "Waiting for another session or process that is computing the same results")
                time.sleep(_WAIT_POLL_S)
            except BaseException:
                self._lock.close()
                raise
        self._stage = self.root / TMP / writer
        _remove(self._stage)  # what a killed run of this writer left half-staged
        self._stage.mkdir()
        self.conn = open_writer_index(self.root / INDEX / f"{writer}.sqlite")

    def close(self) -> None:
        self.conn.close()
        _remove(self._stage)
        fcntl.flock(self._lock, fcntl.LOCK_UN)
        self._lock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- queries on the files (the truth)
    def holds(self, doc_id: str | None, kind: str, text: str | None = None) -> bool:
        """Whether the store holds this unit, computed in this store: its meta.json readable and of this store's
        identity (units.read_meta), and of this text when given. Anything else in its place (damage, another
        store's unit, a link) is not held: a run computes the unit again and commit replaces it."""
        try:
            meta = read_meta(self.root, doc_id, kind, self.identity)
        except LongvizError:
            return False
        return text is None or meta.get("text") == text_digest(text)

    def indexed(self, doc_id: str, kind: str) -> bool:
        """Whether this writer's index holds the unit, indexed in this store (units of another store's index
        copied in are not)."""
        return indexed_identity(self.conn, doc_id, kind, self.identity)

    # ---- writing
    def commit(self, doc_id: str | None, kind: str, record: Record, text: str | None = None) -> bool:
        """Write one unit atomically (doc_id None: a dataset-level unit; `text`: the document's, recorded): stage
        its files, publish the staged folder (the atomic step), then index it.

        Returns False when the store holds the unit already (another writer finished it first); nothing changes
        then. Whatever else is in its place is replaced (see holds)."""
        check_name(kind)
        if doc_id is not None and not DOC_ID.match(doc_id):
            raise ValueError(f"bad doc_id {doc_id!r}")
        final = unit_dir(self.root, doc_id, kind)
        if self.holds(doc_id, kind, text):
            return False
        stage = self._stage / f"{doc_id or 'dataset'}-{kind}-{uuid.uuid4().hex[:8]}"
        try:
            meta = self._stage_unit(stage, doc_id, kind, record, text)
            self._clear_way(doc_id, kind, text)
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

    def _stage_unit(self, stage: Path, doc_id: str | None, kind: str, record: Record, text: str | None) -> dict:
        """The unit's files in `stage`, a fresh folder of the staging area, each and the folder fsync'ed; its meta."""
        stage.mkdir()
        meta = {"format": FORMAT, "doc_id": doc_id, "kind": kind, "identity": self.identity,
                "text": None if text is None else text_digest(text), "scalars": _jsonable(record.scalars),
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
            doc_id = None if final.parent == self.root / DATASET else final.parent.name
            if self.holds(doc_id, final.name):  # lost a race with another writer: theirs stands
                _remove(stage)
                return False
            raise
        fsync_dir(final.parent)
        return True

    def _clear_way(self, doc_id: str | None, kind: str, text: str | None) -> None:
        """Move what stands where the unit goes and is not this store's unit out of the way (into the staging area,
        then removed): a link or a file at docs/<doc_id>, then at the unit's folder a link, a file, or a folder
        that does not hold the unit (damaged, of another store, a meta.json that is a folder). A run so repairs the
        store instead of failing on it for ever ("Directory not empty"). A unit another writer has just published
        in the meantime stays."""
        final = unit_dir(self.root, doc_id, kind)
        if doc_id is not None:
            self._clear(final.parent)  # first: a link there would make the next step move what it points to
        self._clear(final, (doc_id, kind, text))

    def _clear(self, path: Path, unit: tuple | None = None) -> None:
        """Move `path` out of the way when it is a link or not a folder, or when it is the folder of `unit`
        ((doc_id, kind, text), see holds) and does not hold it."""
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            return
        if stat.S_ISDIR(mode) and (unit is None or self.holds(*unit)):
            return
        aside = self._stage / f"replaced-{uuid.uuid4().hex[:8]}"
        try:
            os.rename(path, aside)  # renames a link itself, never what it points to
        except FileNotFoundError:  # another writer moved it first
            return
        _remove(aside)

    def index_from_files(self, doc_id: str, kind: str) -> None:
        """Index a unit that is on disk but not in this writer's index (its writer was killed after the rename)."""
        meta, tables = read_unit_tables(self.root, doc_id, kind, self.identity)
        index_unit(self.conn, doc_id, kind, meta, tables)


def _remove(path: Path) -> None:
    """Remove a file, link or folder of the staging area (a link itself, never what it points to)."""
    if is_link(path) or path.is_file():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path, ignore_errors=True)


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

