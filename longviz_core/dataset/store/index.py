"""The store's SQLite index: one WAL database per writer mirroring every unit's tables and identity, opened for
writing or reading, its damage told apart from a bad query."""
from __future__ import annotations

import json
import logging
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd

from .manifest import identity_fault
from .units import is_link, table_name

log = logging.getLogger("longviz_core.dataset.store")

class DamagedIndex(Exception):
    """Raised inside ResultStore.query when an index file turns out damaged only while it is queried."""

    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


def is_damage(exc: Exception) -> bool:
    """Whether an SQLite error means a damaged file (rather than a bad query)."""
    cause = exc if isinstance(exc, sqlite3.DatabaseError) else exc.__cause__ or exc.__context__
    if any(s in str(exc) for s in ("malformed", "not a database")):
        return True
    return isinstance(cause, sqlite3.DatabaseError) and not isinstance(cause, sqlite3.OperationalError)


def open_writer_index(path: Path) -> sqlite3.Connection:
    """The writer's own index, schema ready. A damaged one (truncated, overwritten) is removed with a warning
    and started afresh: the unit files are the truth; the run re-indexes the units of its rows as it passes
    them, and readers index any other unit from its files. A link in its place is removed (written through, the
    index would be another store's) and the index started afresh the same way."""
    if is_link(path):
        log.warning("The store index %s is a symbolic link; replacing it by an index of this store's own.", path)
        path.unlink()
    conn = None
    try:
        conn = _connect(path)
        init_schema(conn)
        if conn.execute("PRAGMA quick_check(1)").fetchone()[0] != "ok":
            raise sqlite3.DatabaseError("database disk image is malformed (quick_check)")
        if "identity" not in {r[1] for r in conn.execute("PRAGMA table_info(entries)")}:
            raise sqlite3.DatabaseError("its entries record no identity (an index of another store format)")
        return conn
    except sqlite3.DatabaseError as exc:
        if not is_damage(exc):
            raise
        log.warning("The store index %s is damaged (%s); rebuilding it from the unit files.", path, exc)
        if conn is not None:
            conn.close()
        for p in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            p.unlink(missing_ok=True)
    conn = _connect(path)
    init_schema(conn)
    return conn


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=60, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")  # readers (the app) never block the writer and vice versa
    conn.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL survives process kills; the files are the truth
    return conn


def connect_read(path: Path) -> sqlite3.Connection:
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=60, check_same_thread=False)
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return conn
    except sqlite3.OperationalError as exc:  # a read-only directory cannot hold WAL's shared-memory file
        if is_damage(exc):
            raise
        conn = sqlite3.connect(f"file:{path}?immutable=1", uri=True, check_same_thread=False)
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return conn


def init_schema(conn: sqlite3.Connection) -> None:
    with conn:
        conn.execute("CREATE TABLE IF NOT EXISTS entries(doc_id TEXT NOT NULL, kind TEXT NOT NULL, scalars TEXT, "
                      "identity TEXT, PRIMARY KEY (doc_id, kind))")
        conn.execute("CREATE TABLE IF NOT EXISTS _columns(tbl TEXT NOT NULL, col TEXT NOT NULL, dtype TEXT NOT NULL, "
                      "PRIMARY KEY (tbl, col))")


_SQL_TYPES = {"i": "INTEGER", "u": "INTEGER", "b": "INTEGER", "f": "REAL"}


def index_unit(conn: sqlite3.Connection, doc_id: str, kind: str, meta: dict, tables: dict) -> None:
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
        conn.execute("INSERT OR REPLACE INTO entries VALUES (?, ?, ?, ?)",
                     (doc_id, kind, json.dumps(meta["scalars"]), json.dumps(meta.get("identity"), sort_keys=True)))


class IdentityCheck:
    """identity_fault of an index entry's recorded identity (JSON text), remembered per text: an index holds few
    distinct identities (one per state of the manifest's kinds), and a store checks every entry it opens."""

    def __init__(self, expected: dict):
        self.expected = expected
        self._seen: dict = {}

    def __call__(self, text) -> bool:
        """Whether an entry recording `text` was indexed in the store of identity `expected`."""
        if text not in self._seen:
            try:
                recorded = json.loads(text) if isinstance(text, str) else None
            except ValueError:
                recorded = None
            self._seen[text] = identity_fault(recorded, self.expected) is None
        return self._seen[text]


def indexed_identity(conn: sqlite3.Connection, doc_id: str, kind: str, expected: dict) -> bool:
    """Whether the index holds the unit, indexed in the store of identity `expected`."""
    row = conn.execute("SELECT identity FROM entries WHERE doc_id=? AND kind=?", (doc_id, kind)).fetchone()
    return row is not None and IdentityCheck(expected)(row[0])


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


def restore_dtypes(df: pd.DataFrame, dtypes: dict) -> pd.DataFrame:
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
