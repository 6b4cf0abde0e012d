"""The store's manifest: what a store holds (model, dataset, settings per kind, package versions), sealed with
its own checksum, and the check that refuses to mix results made under other ones."""
from __future__ import annotations

import json
from pathlib import Path

from ..._disk import atomic_write, bytes_digest, file_lock
from ...errors import CacheCorruptError, ManifestMismatchError
from .units import FORMAT, write_error

MANIFEST = "manifest.json"
_CHECKSUM = "checksum"  # the manifest's own BLAKE2b, over its other keys
# Version keys whose change may change the numbers; a mismatch refuses unless explicitly allowed.
NUMERIC_PACKAGES = ("longviz_core", "torch", "transformers", "captum", "numpy")


def read_manifest(root) -> dict | None:
    """The store's manifest (None when there is none), its checksum checked: a manifest that settings are read
    from must not have changed since it was written (a flipped digit could make a store claim other settings)."""
    path = Path(root) / MANIFEST
    try:
        manifest = json.loads(path.read_text())
        recorded = manifest.pop(_CHECKSUM, None) if isinstance(manifest, dict) else None
        if not isinstance(manifest, dict):
            raise ValueError("not a JSON object")
        if recorded != _manifest_checksum(manifest):
            raise ValueError("its checksum is missing or differs from the one recorded when it was written")
        if manifest.get("format") != FORMAT:
            raise ManifestMismatchError(f"{root} is a store of format {manifest.get('format')}; this longviz reads "
                                        f"format {FORMAT}. Precompute into a new --out directory.")
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
