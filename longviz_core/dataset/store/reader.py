"""Reading a store: the units on disk (links never followed), the indexes that own them (damaged ones set aside,
entries of another store ignored), SQL over every index, and the result kinds' dataset-wide queries (each beside
its kind, in dataset.kinds)."""
from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
import threading
from pathlib import Path

import numpy as np
import pandas as pd

from ...errors import LongvizError, StoreError, whole_number
from ..kinds.agreement import AgreementQueries
from ..kinds.attention import AttentionQueries
from ..kinds.attribution import AttributionQueries
from ..kinds.faithfulness import FaithfulnessQueries
from ..kinds.head_importance import HeadImportanceQueries
from ..kinds.leaderboard import LeaderboardQueries
from .index import DamagedIndex, IdentityCheck, connect_read, index_unit, init_schema, is_damage, restore_dtypes
from .manifest import MANIFEST, read_manifest, unit_identity
from .units import (
    INDEX,
    Record,
    is_link,
    link_problem,
    load_npy,
    load_unit,
    read_meta,
    read_unit_tables,
    scan_store,
    table_name,
    unit_dir,
    unit_present,
)

log = logging.getLogger("longviz_core.dataset.store")


class ResultStore(AttentionQueries, AttributionQueries, HeadImportanceQueries, AgreementQueries, FaithfulnessQueries,
                  LeaderboardQueries):
    """Read access to a store: documents, units, and the dataset-wide aggregates the app shows.

    The set of units is read from the files when the store is opened (call refresh() to see newer ones).
    `limit`: read only the first `limit` documents (dataset rows < limit), as the app does for the documents a
    user asked for; every count and aggregate is then over those."""

    def __init__(self, path, limit: int | None = None):
        self.root = Path(path)
        self.limit = None if limit is None else whole_number(limit, "limit (documents)", lo=0)
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
        self.identity = unit_identity(self.manifest)
        on_disk, self._dataset_units, self._problems = scan_store(self.root)  # {(doc_id, kind)}, kinds, problems
        if self.limit is not None:
            on_disk = {(d, k) for d, k in on_disk if int(d) < self.limit}
        owner: dict[tuple[str, str], int] = {}
        ours = IdentityCheck(self.identity)
        index = self.root / INDEX
        linked = is_link(index)
        if linked:
            self._problems.append(link_problem(index))
        for path in [] if linked else sorted(index.glob("*.sqlite")):
            if path.stem in self._damaged:
                continue
            if is_link(path):  # another store's index, say: its entries are not this store's
                self._problems.append(link_problem(path))
                continue
            try:
                conn = connect_read(path)
            except sqlite3.DatabaseError as exc:
                self._index_damaged(path.stem, exc)
                continue
            try:
                rows = conn.execute("SELECT doc_id, kind, identity FROM entries").fetchall()
            except sqlite3.OperationalError:  # a writer has created the file but not its tables yet
                conn.close()
                continue
            except sqlite3.DatabaseError as exc:
                conn.close()
                self._index_damaged(path.stem, exc)
                continue
            self._conns.append((path.stem, conn))
            for doc_id, kind, identity in rows:
                if (doc_id, kind) in on_disk and ours(identity):
                    owner.setdefault((doc_id, kind), len(self._conns) - 1)
        orphans = sorted(on_disk - set(owner))
        if orphans:  # units whose writer died before indexing them: index them here, in memory
            mem = sqlite3.connect(":memory:", check_same_thread=False)
            init_schema(mem)
            for doc_id, kind in orphans:
                try:
                    meta, tables = read_unit_tables(self.root, doc_id, kind, self.identity)
                except LongvizError as exc:  # damaged, or another store's: not served, and verify says so
                    log.warning("%s", exc)
                    self._problems.append(str(exc))
                    on_disk.discard((doc_id, kind))
                    continue
                index_unit(mem, doc_id, kind, meta, tables)
                owner[(doc_id, kind)] = len(self._conns)
            self._conns.append(("(files)", mem))
        self._owner = owner
        self._units = on_disk
        return self

    def _index_damaged(self, name: str, exc: Exception) -> None:
        """Stop using a damaged index file; the units it held are indexed from their files (the truth)."""
        self._damaged.add(name)
        log.warning("The store index %s is damaged (%s); indexing its units from the unit files instead. "
                    "The next precompute into the store rebuilds it.", self.root / INDEX / f"{name}.sqlite", exc)

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
        """Whether any result of `kind` is stored (a dataset-level kind: whether it is, on disk now)."""
        return self.count(kind) > 0 or unit_present(self.root, None, kind)

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
        for kind in sorted(self._dataset_units):
            h.update(f"dataset/{kind};".encode())
        return h.hexdigest()

    # ---- units
    def load(self, doc_id: str | None, kind: str) -> Record:
        """One unit's arrays, tables and scalars (doc_id None: the dataset-level unit of `kind`), checksums
        checked, and the unit checked to be this store's; see load_unit."""
        return load_unit(self.root, doc_id, kind, self.identity)

    def array(self, doc_id: str | None, kind: str, name: str) -> np.ndarray:
        try:
            meta = read_meta(self.root, doc_id, kind, self.identity)
        except StoreError:
            meta = None
        if meta is None or name not in meta["arrays"]:
            raise StoreError(f"The store has no array '{name}' of '{kind}' for {doc_id or 'the dataset'}.")
        return load_npy(self.root, unit_dir(self.root, doc_id, kind) / f"{name}.npy", meta["arrays"][name])

    def verify(self) -> list[str]:
        """Every problem of the store as it was opened (refresh() to look again): each entry it cannot read as a
        unit of its own (a link, a file, a folder without a readable meta.json, a unit of another store), and each
        unit whose files differ from their recorded sizes and hashes. Each names the path and its fix."""
        problems = list(self._problems)
        for doc_id, kind in sorted(self._units) + [(None, k) for k in sorted(self._dataset_units)]:
            try:
                self.load(doc_id, kind)
            except LongvizError as exc:
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
                except DamagedIndex as damaged:  # found damaged only now (e.g. truncated past its first page)
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
                if name == "(files)" or not is_damage(exc):
                    raise
                raise DamagedIndex(name) from exc
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    def table(self, kind: str, name: str) -> pd.DataFrame:
        """All documents' rows of one table of `kind`, with a doc_id column, ordered by document."""
        t = table_name(kind, name)
        df = self.query(kind, f'SELECT * FROM "{t}" WHERE doc_id IN (SELECT doc_id FROM owned)')
        if df.empty:
            return df
        dtypes = self.query(kind, "SELECT col, dtype FROM _columns WHERE tbl = ?", (t,))
        df = restore_dtypes(df, dict(zip(dtypes["col"], dtypes["dtype"])) if len(dtypes) else {})
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
