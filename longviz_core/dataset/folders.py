"""Is this folder a result store? The one check before anything writes a store into a folder or deletes one, so
a mistyped --out, a cache folder holding something else, or a symlink never costs anyone their files."""
from __future__ import annotations

import os
import stat
from pathlib import Path

from ..errors import StoreError
from .store import MANIFEST

# what a store holds at its top level (dataset/store.py's layout, its lock files and the run logs); a folder with
# only these, without a manifest yet, is a store a concurrent run is creating
STORE_ENTRIES = frozenset({MANIFEST, ".manifest.lock", "docs", "dataset", "index", "tmp", "log"})


def is_store(folder) -> bool:
    """True when `folder` is a real folder (not a symlink) holding a store's manifest."""
    p = Path(folder)
    try:
        return stat.S_ISDIR(os.lstat(p).st_mode) and (p / MANIFEST).is_file()
    except OSError:
        return False


def check_store_target(folder) -> Path:
    """`folder` when a store may be written there: it does not exist yet, or is an empty folder, or is a store
    (or one a concurrent run is creating); else StoreError saying why. Never writes anything."""
    p = Path(folder).expanduser()
    try:
        info = os.stat(p)
    except FileNotFoundError:
        return p
    except OSError as exc:
        raise StoreError(f"The store folder {p} cannot be used: {exc.strerror or exc}.") from None
    if not stat.S_ISDIR(info.st_mode):
        raise StoreError(f"{p} is a file, not a folder: give --out a new or empty folder (or an existing store).")
    try:
        entries = {e.name for e in os.scandir(p)}
    except OSError as exc:
        raise StoreError(f"The store folder {p} cannot be read: {exc.strerror or exc}.") from None
    if entries and MANIFEST not in entries and not entries <= STORE_ENTRIES:
        shown = ", ".join(sorted(entries)[:5]) + (", …" if len(entries) > 5 else "")
        raise StoreError(f"{p} is not empty and is not a longviz result store (it holds {shown}); a store is only "
                         "written into a new or empty folder, or into a store, so nothing there is overwritten. "
                         "Give --out another folder.")
    return p


def deletable_stores(root) -> tuple[list[Path], list[Path]]:
    """The entries of `root` split into (stores that may be deleted, entries left alone): symlinks, files and
    folders that are not stores are never deleted, nor followed."""
    stores, others = [], []
    for entry in sorted(Path(root).iterdir()):
        (stores if is_store(entry) else others).append(entry)
    return stores, others
