"""The deletion test's engine: perturbed copies scored once each and batched across rankings, the exact first-flip
scans advanced together, their positions kept on disk (the definitions and the result: evaluation.deletion)."""
from __future__ import annotations

import hashlib
import math
import threading
import time
from typing import Mapping

import numpy as np

from .._disk import JsonStore, array_digest, digest
from ..model import copies
from ..model.analysis import DocumentAnalysis
from ..model.encoding import Encoded
from ..model.loading import LoadedModel
from ..model.segments import segment
from ..progress import Progress, format_seconds, report
from ..runtime import COMPUTE
from .deletion import (
    RANDOM, DeletionError, DeletionResult, DeletionSettings, RankingCurve, default_batch_size,
    random_order, removed_count,
)

_REPORT_EVERY_S = 0.25  # progress reports during the scans: one per round, at most this often

def deletion_test(
    model: LoadedModel,
    analysis: DocumentAnalysis,
    orders: Mapping[str, np.ndarray],
    settings: DeletionSettings = DeletionSettings(),
    progress: Progress | None = None,
    *,
    labels: Mapping[str, str] | None = None,
    resume: bool = False,
    cache_dir=None,
    stop: threading.Event | None = None,
) -> DeletionResult:
    """Curves and first flips of every order in `orders` (name -> removable positions, most important first) and
    of one random order per settings.seed (named 'random'), on one document. Deletion by units
    (settings.unit other than "token"): each order is a permutation of the unit indices 0 .. m_u-1 of
    model.segments.segment(analysis, settings.unit) (evaluation.deletion.removal_order with `segments`), and
    every count is a count of units.

    resume: keep each scan's position on disk (LONGVIZ_CACHE_DIR/flip-scans/, or under cache_dir), keyed by the
    model's fingerprint, the document, the replacement and the order. stop: when set, the scans end after the
    forward in flight and the result holds every count scored (`stopped`); with resume they go on from there.
    progress: the stage, the counts settled and an upper bound of the time left (a flip ends a scan early).

    The explained quantity and the decision are the head's (model.heads): p(y), sigmoid_y or the score; a
    regression head's flips need settings.threshold, and without one no scan runs (`DeletionResult.flips`)."""
    started = time.monotonic()
    head = model.head
    threshold = head.check_threshold(settings.threshold)
    enc = analysis.encoded
    n, m = analysis.n, len(enc.text_positions)
    if m < 1:
        raise DeletionError(f"a document needs at least one text token between its special tokens, got n={n}")
    segments = None if settings.unit == "token" else segment(analysis, settings.unit)
    removable = enc.text_positions if segments is None else np.arange(len(segments), dtype=np.int64)
    m = len(removable)
    runs: list[tuple[str, int | None, np.ndarray]] = []
    for name, order in orders.items():
        if name == RANDOM:
            raise DeletionError("'random' is the seeded baseline: give its seeds in the settings, not an order")
        order = np.asarray(order, dtype=np.int64)
        if order.shape != (m,) or sorted(order.tolist()) != removable.tolist():
            what = "removable positions" if segments is None else f"{settings.unit} units (their indices)"
            raise DeletionError(f"the order {name!r} must be a permutation of the {m} {what}")
        runs.append((name, None, order))
    runs += [(RANDOM, s, random_order(n, s, enc.prefix, enc.suffix) if segments is None
              else random_order(m, s, 0, 0)) for s in settings.seeds]
    if not runs:
        raise DeletionError("choose at least one ranking")
    removals = [_removal(order, segments) for _, _, order in runs]
    scorer = _Scorer(model, analysis.encoded, replacement_id(model, settings.replacement),
                     default_batch_size(model, n) if settings.batch_size is None else settings.batch_size)
    counts = [removed_count(k, m) for k in settings.ks]
    flips = head.has_decision(threshold)
    limit = settings.limit(m) if flips else 0  # no decision, no scan
    with COMPUTE.hold():
        report(progress, 0.0, f"Deletion curves: {len(runs)} rankings")
        intact = scorer.log_outputs([(removals[0][0], 0)], owner=-1)[0]
        predicted = head.predicted(intact)  # an argmax: the same on the log scale, without exp's underflow
        base = intact[predicted]
        curve_logp = scorer.log_outputs([(tokens, cuts[c]) for tokens, cuts in removals for c in counts],
                                        owners=[i for i in range(len(runs)) for _ in counts])
        curve_logp = curve_logp[:, predicted].reshape(len(runs), len(counts))  # (runs, K)

        def flipped(log_outputs: np.ndarray) -> np.ndarray:  # (copies, labels) -> (copies,) bool
            return head.decision(log_outputs, predicted, threshold) != head.decision(intact, predicted, threshold)

        saved = _ScanStore(model, analysis.encoded, scorer.replacement_id, predicted, threshold,
                           cache_dir, segments) if resume and flips else None
        scans = _Scans(scorer, [order for _, _, order in runs], removals, flipped, limit, saved, progress, stop,
                       [labels_of(labels, name, seed) for name, seed, _ in runs], settings.unit)
        scans.run()
        report(progress, 1.0, "Done")
    out = []
    for i, ((name, seed, order), lp) in enumerate(zip(runs, curve_logp)):
        flip = scans.flip[i]
        out.append(RankingCurve(
            name=name, order=order, removed=np.asarray(counts, dtype=np.int64), probs=head.value(lp),
            aopc_k=head.value(base) - head.value(lp),
            lodds_k=lp - base if head.probabilities else None,  # a score has no log-odds
            flip_removed=flip, flip_fraction=None if flip is None else flip / m,
            scanned=scans.clear[i] if flip is None else flip, seed=seed, copies=scorer.owned.get(i, 0),
            flips=flips))
    needed = 1 + sum(len(counts) + r.scanned for r in out)
    return DeletionResult(
        ks=settings.ks, predicted=predicted, p_original=float(head.value(base)), n=n, n_removable=m,
        replacement=model.tokenizer.convert_ids_to_tokens(scorer.replacement_id), flip_limit=limit, runs=tuple(out),
        labels={RANDOM: "Random", **(labels or {})}, forward_passes=scorer.copies, copies_needed=needed,
        seconds=time.monotonic() - started, head=head.kind, threshold=threshold, stopped=scans.stopped,
        unit=settings.unit)


def _removal(order: np.ndarray, segments) -> tuple[np.ndarray, np.ndarray]:
    """(tokens, cuts) of a removal order: removing its first c entries replaces tokens[:cuts[c]]. By tokens the
    order itself and cuts = 0 .. m; by units the units' tokens one unit after another, cuts at their ends."""
    if segments is None:
        return order, np.arange(len(order) + 1, dtype=np.int64)
    spans = np.asarray(segments.spans, dtype=np.int64)[order]  # (m_u, 2)
    tokens = np.concatenate([np.arange(a, b, dtype=np.int64) for a, b in spans])
    return tokens, np.r_[0, np.cumsum(spans[:, 1] - spans[:, 0])].astype(np.int64)


def labels_of(labels, name: str, seed) -> str:
    label = (labels or {}).get(name, "Random" if name == RANDOM else name)
    return label if seed is None else f"{label} (seed {seed})"


def replacement_id(model: LoadedModel, replacement: str) -> int:
    """The token id a removed token becomes (REPLACEMENTS); DeletionError when the tokenizer has none."""
    return copies.replacement_id(model, replacement, DeletionError)


class _Scorer:
    """Scores perturbed copies of one document, each removed set once (keyed by the sorted positions), in
    forwards of `batch_size` copies; counts the copies scored and which run first asked for each."""

    def __init__(self, model: LoadedModel, enc: Encoded, replacement_id: int, batch_size: int) -> None:
        self.model, self.enc, self.replacement_id, self.batch_size = model, enc, int(replacement_id), int(batch_size)
        self.known: dict[bytes, np.ndarray] = {}  # removed-set digest -> (classes,) Head.log_outputs
        self.copies = 0
        self.owned: dict[int, int] = {}

    @staticmethod
    def _key(order: np.ndarray, count: int) -> bytes:
        return hashlib.blake2b(np.sort(order[:count]).tobytes(), digest_size=16).digest()

    def log_outputs(self, probes: list[tuple[np.ndarray, int]], owners: list[int] | None = None,
                    owner: int = -1) -> np.ndarray:
        """(len(probes), classes): the head's log-probabilities (or a regression's score) of the input with
        order[:count] replaced, per probe."""
        owners = owners or [owner] * len(probes)
        keys = [self._key(order, c) for order, c in probes]
        todo, seen = [], set()
        for key, probe, who in zip(keys, probes, owners):
            if key not in self.known and key not in seen:
                seen.add(key)
                todo.append((key, probe, who))
        for start in range(0, len(todo), self.batch_size):
            chunk = todo[start : start + self.batch_size]
            ids = np.repeat(self.enc.input_ids[None, :], len(chunk), axis=0)  # (B, n)
            for row, (_, (order, count), _) in enumerate(chunk):
                ids[row, order[:count]] = self.replacement_id
            for (key, _, who), lp in zip(chunk, self._forward(ids)):
                self.known[key] = lp
                self.owned[who] = self.owned.get(who, 0) + 1
            self.copies += len(chunk)
        return np.stack([self.known[k] for k in keys])

    def _forward(self, ids: np.ndarray) -> np.ndarray:
        return self.model.head.log_outputs(copies.copy_logits(self.model, self.enc, ids)).cpu().numpy()  # (B, classes)


class _Scans:
    """The exact first-flip scans of every order, advanced together: each round gives every unfinished scan its
    next consecutive counts (the batch shared between them), then settles a scan at the smallest flipping count of
    its chunk. clear[i]: every count 1 .. clear[i] keeps the decision; flip[i]: the first count that does not, or
    None. `flipped`: (copies, classes) log-outputs -> whether each copy's decision differs from the intact one.
    Counts are of `unit`s; removals[i] = _removal(orders[i]) says which tokens each count removes."""

    def __init__(self, scorer: _Scorer, orders: list[np.ndarray], removals: list, flipped, limit: int, saved,
                 progress, stop, names: list[str], unit: str = "token") -> None:
        self.scorer, self.orders, self.removals, self.flipped, self.limit = scorer, orders, removals, flipped, limit
        self.saved, self.progress, self.stop, self.names, self.unit = saved, progress, stop, names, unit
        self.clear = [0] * len(orders)
        self.flip: list[int | None] = [None] * len(orders)
        self.stopped = False
        if saved is not None:
            for i, order in enumerate(orders):
                clear, flip = saved.get(order)
                self.flip[i] = flip if flip is not None and flip <= limit else None
                self.clear[i] = (flip - 1) if self.flip[i] is not None else min(clear, limit)

    def _open(self) -> list[int]:
        return [i for i in range(len(self.orders)) if self.flip[i] is None and self.clear[i] < self.limit]

    def run(self) -> None:
        total = sum(self.limit - self.clear[i] for i in self._open())
        started, copies0, last, done = time.monotonic(), self.scorer.copies, -math.inf, 0
        while True:
            open_ = self._open()
            if not open_:
                break
            if self.stop is not None and self.stop.is_set():
                self.stopped = True
                break
            per = max(1, self.scorer.batch_size // len(open_))
            chunks = {i: list(range(self.clear[i] + 1, min(self.limit, self.clear[i] + per) + 1)) for i in open_}
            probes = [(self.removals[i][0], self.removals[i][1][c]) for i in open_ for c in chunks[i]]
            owners = [i for i in open_ for _ in chunks[i]]
            flipped = self.flipped(self.scorer.log_outputs(probes, owners))
            at = 0
            for i in open_:
                mine = flipped[at : at + len(chunks[i])]
                at += len(chunks[i])
                if mine.any():
                    self.flip[i] = chunks[i][int(np.argmax(mine))]
                    done += self.limit - self.clear[i]
                    self.clear[i] = self.flip[i] - 1
                else:
                    done += len(chunks[i])
                    self.clear[i] = chunks[i][-1]
                if self.saved is not None:
                    self.saved.record(self.orders[i], self.clear[i], self.flip[i])
            now = time.monotonic()
            if self.progress is not None and now - last >= _REPORT_EVERY_S and total:
                last = now
                scored = self.scorer.copies - copies0
                left = (now - started) / scored * (total - done) if scored else math.nan
                eta = f"; at most about {format_seconds(left)} left" if scored else ""
                report(self.progress, done / total, f"Decision flips (exact scan to {self.limit:,} {self.unit}s), "
                       f"{len(open_)} rankings open, {self.names[open_[0]]} at {self.clear[open_[0]]:,}{eta}")
        if self.saved is not None:
            for i, order in enumerate(self.orders):
                self.saved.record(order, self.clear[i], self.flip[i], force=True)


class _ScanStore:
    """Where each flip scan has got to, on disk: {"clear": c, "flip": f or None} per (document, replacement,
    predicted class, regression threshold, units, order), written at most every few seconds while scans run and
    when they end."""

    EVERY_S = 5.0

    def __init__(self, model: LoadedModel, enc: Encoded, replacement_id: int, predicted: int,
                 threshold: float | None, cache_dir, segments=None) -> None:
        self.store = JsonStore("flip-scans", cache_dir)
        self.base = {"v": 2, "model": model.fingerprint, "ids": array_digest(enc.input_ids),
                     "positions": array_digest(enc.position_ids), "global": array_digest(enc.global_mask),
                     "replacement": int(replacement_id), "predicted": int(predicted)}
        if threshold is not None:  # a regression's decision; label heads keep the keys they had
            self.base["threshold"] = float(threshold)
        if segments is not None:  # by units, a count means the units' tokens; by tokens the keys stay as they were
            self.base["units"] = array_digest(np.asarray(segments.spans, dtype=np.int64))
        self.last = time.monotonic()

    def _key(self, order: np.ndarray) -> str:
        return digest({**self.base, "order": array_digest(order)})

    def get(self, order: np.ndarray) -> tuple[int, int | None]:
        value = self.store.get(self._key(order)) or {}
        return int(value.get("clear", 0)), (None if value.get("flip") is None else int(value["flip"]))

    def record(self, order: np.ndarray, clear: int, flip: int | None, force: bool = False) -> None:
        """Keeps the furthest position known (an earlier run with a larger bound may have gone further)."""
        if flip is None and not force and time.monotonic() - self.last < self.EVERY_S:
            return
        old_clear, old_flip = self.get(order)
        if old_flip is None and (flip is not None or clear > old_clear):
            self.store.put(self._key(order), {"clear": max(clear, old_clear), "flip": flip})
        self.last = time.monotonic()


replacements_for = copies.replacements_for

__all__ = ["deletion_test", "replacement_id", "replacements_for"]
