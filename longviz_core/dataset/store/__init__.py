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
Every unit's meta.json also records the identity of the store it was computed in (the model's and the dataset's
fingerprints, max_tokens, a digest of each kind's settings; manifest.unit_identity) and the digest of its
document's text, and so does every index entry: a unit or an index copied in from another store is never
served, and a run computes the unit again in its place. A store reads only its own files: symbolic links inside
it are never followed (unit discovery lists them as problems), and every metadata file is read within a bound.
A unit folder that is not the store's own (damaged meta.json, another store's unit, a link) is replaced by the
next run that computes it. A write that fails (a full disk) leaves nothing of its unit behind and is a
StoreError saying so.

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

Modules: units.py (the layout, a unit's checked files), manifest.py, writer.py, index.py (SQLite), reader.py
(ResultStore); each result kind's queries live beside the kind, in dataset/kinds/.
"""
from .manifest import FORMAT, MANIFEST, NUMERIC_PACKAGES, manifest_conflicts, open_manifest, read_manifest
from .units import Record, doc_id_of, load_unit, scan_units, table_name
from .writer import StoreWriter

__all__ = ["FORMAT", "MANIFEST", "NUMERIC_PACKAGES", "Record", "ResultStore", "StoreWriter", "doc_id_of", "load_unit",
           "manifest_conflicts", "open_manifest", "read_manifest", "scan_units", "table_name"]


def __getattr__(name: str):
    # ResultStore is loaded on first use: its kinds' queries (dataset.kinds) import the store's units, so an eager
    # import here would be circular whenever dataset.kinds is imported first.
    if name == "ResultStore":
        from .reader import ResultStore

        return ResultStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
