"""The store's manifest: what a store holds (model, dataset, settings per kind, package versions), sealed with
its own checksum, the check that refuses to mix results made under other ones, and the identity every unit
records of the store it was computed in."""
from __future__ import annotations

import errno
import json
from pathlib import Path

from ..._disk import METADATA_BYTES, atomic_write, bytes_digest, digest, file_lock, read_file
from ...errors import CacheCorruptError, ManifestMismatchError, StoreError

# 2: manifests sealed by their checksum, token counts by type and by word, exact flip scans; 3: every unit records
# the identity of the store it was computed in (unit_identity)
FORMAT = 3
MANIFEST = "manifest.json"
_CHECKSUM = "checksum"  # the manifest's own BLAKE2b, over its other keys
# Version keys whose change may change the numbers; a mismatch refuses unless explicitly allowed.
NUMERIC_PACKAGES = ("longviz_core", "torch", "transformers", "captum", "numpy")


def read_manifest(root) -> dict | None:
    """The store's manifest (None when there is none), its checksum checked: a manifest that settings are read
    from must not have changed since it was written (a flipped digit could make a store claim other settings)."""
    path = Path(root) / MANIFEST
    try:
        # bounded, and never through a link: a manifest linked to /dev/zero or to another store's is refused
        manifest = json.loads(read_file(path, "it", METADATA_BYTES, ValueError, links=False))
        recorded = manifest.pop(_CHECKSUM, None) if isinstance(manifest, dict) else None
        if not isinstance(manifest, dict):
            raise ValueError("not a JSON object")
        if recorded != _manifest_checksum(manifest):
            raise ValueError("its checksum is missing or differs from the one recorded when it was written")
        if manifest.get("format") != FORMAT:
            raise ManifestMismatchError(f"{root} is a store of format {manifest.get('format')}; this longviz reads "
                                        f"format {FORMAT}. Precompute into a new --out directory.")
        _check_shape(manifest)
        return manifest
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError) as exc:
        raise CacheCorruptError(f"The store manifest {path} is unreadable or damaged ({str(exc).rstrip('.')}); it "
                                "cannot be trusted. "
                                f"Restore it from a backup, or precompute into a new --out directory.") from exc


def _check_shape(manifest: dict) -> None:
    """ValueError unless the manifest holds what every reader of it takes for granted (the checksum proves only
    that it is unchanged since written, not what wrote it)."""
    model, dataset = manifest.get("model"), manifest.get("dataset")
    if not (isinstance(model, dict) and isinstance(model.get("fingerprint"), str)):
        raise ValueError("it names no model fingerprint")
    if not (isinstance(dataset, dict) and isinstance(dataset.get("fingerprint"), str)
            and type(dataset.get("n_documents")) is int and dataset["n_documents"] >= 0):
        raise ValueError("it names no dataset fingerprint and size")
    if type(manifest.get("max_tokens")) is not int:
        raise ValueError("it records no max_tokens")
    kinds = manifest.get("kinds", {})
    if not (isinstance(kinds, dict) and all(isinstance(v, dict) for v in kinds.values())):
        raise ValueError("its settings per kind are not a table")


def unit_identity(manifest: dict) -> dict:
    """What every unit records of the store it is computed in: the model's and the dataset's fingerprints,
    max_tokens, and a digest of each kind's settings in the manifest. A kind's settings never change in a store
    (open_manifest refuses), kinds are only added: so a unit of this store records a subset of this identity's
    settings, and one computed elsewhere (another model, dataset, max_tokens or settings) differs somewhere."""
    return {"model": manifest["model"]["fingerprint"], "dataset": manifest["dataset"]["fingerprint"],
            "max_tokens": manifest["max_tokens"],
            "settings": {kind: digest(s) for kind, s in manifest.get("kinds", {}).items()}}


def identity_fault(recorded, expected: dict) -> str | None:
    """Why a unit recording `recorded` was not computed in the store of identity `expected` (unit_identity), or
    None when it was."""
    if not isinstance(recorded, dict) or not isinstance(recorded.get("settings"), dict):
        return "it records no identity of the model, data and settings it was computed with"
    for key, what in (("model", "model"), ("dataset", "dataset"), ("max_tokens", "max_tokens")):
        if recorded.get(key) != expected[key]:
            return (f"it was computed with another {what} ({recorded.get(key)!r}; this store's is "
                    f"{expected[key]!r})")
    for kind, d in sorted(recorded["settings"].items()):
        if kind not in expected["settings"]:
            return f"it was computed in a store holding '{kind}' results, which this store has no settings for"
        if d != expected["settings"][kind]:
            return f"it was computed with other settings of '{kind}' than this store's"
    return None


def write_error(root: Path, what: str, exc: OSError) -> StoreError:
    """A failed write as a StoreError saying what the store holds now and what to do."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        cause = f"the disk holding {root} is full (or the quota is used up)"
    else:
        cause = f"{exc.strerror or exc} ({getattr(exc, 'filename', None) or root})"
    return StoreError(f"Could not write {what} into the store {root}: {cause}. Everything written before is intact; "
                      "free space (or fix the cause) and run the same command again: it resumes where it stopped.")


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
            raise write_error(root, "the manifest", exc) from exc
        return merged
