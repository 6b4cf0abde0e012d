"""How long the deletion test takes before it starts: the copies it scores, each about a forward of the document as
attribution.cost estimates one on this machine, and the notice a page shows before a long run."""
from __future__ import annotations

from typing import Sequence

from ..attribution import budget, cost
from ..model.analysis import DocumentAnalysis
from ..model.loading import LoadedModel
from ..progress import format_seconds
from .deletion import KS, DeletionError

# A perturbed copy, in forwards of the document through the model's own route. Long documents, where a notice is
# due, gain nothing from batching copies: 0.98-0.99 in batches of 8 at ModernBERT-base dimensions, 8,192 tokens
# (docs/benchmarks.md "8,192 tokens end to end"); short ones do (0.26-0.62 at 1,024-2,597 tokens, "Faithfulness"),
# where the estimate then errs long.
COPY_FORWARDS = 1.0


def deletion_copies(runs: int, ks: Sequence[float] = KS, flip_bound: int | None = 0,
                    n_removable: int | None = None) -> int:
    """The most copies the deletion test scores for `runs` orders (rankings and random seeds together): the intact
    input, one per order and fraction in `ks`, and with a flip bound (tokens; None: every count, the exact scan,
    which needs n_removable) one per order and count up to it. Sharing (equal removed sets) only lowers it."""
    if runs < 1:
        raise DeletionError("the deletion test needs at least one order")
    if flip_bound is None and n_removable is None:
        raise DeletionError("the exact scan (flip_bound=None) scores up to every count: give n_removable")
    scan = int(n_removable if flip_bound is None else flip_bound)
    if n_removable is not None:
        scan = min(scan, int(n_removable))
    return 1 + int(runs) * (len(ks) + scan)


def deletion_seconds(model: LoadedModel, analysis: DocumentAnalysis, runs: int, *, ks: Sequence[float] = KS,
                     flip_bound: int | None = 0) -> float:
    """Expected wall seconds of the deletion test on `analysis`: deletion_copies x COPY_FORWARDS x one forward
    (attribution.cost.estimate_forward: timed on this machine once per model and length bucket)."""
    copies = deletion_copies(runs, ks, flip_bound, len(analysis.encoded.text_positions))
    return copies * COPY_FORWARDS * cost.estimate_forward(model, analysis.n).seconds


def deletion_notice(model: LoadedModel, analysis: DocumentAnalysis, runs: int, *, ks: Sequence[float] = KS,
                    flip_bound: int | None = 0, what: str = "The deletion curves") -> str | None:
    """'The deletion curves score up to 41 copies of this 8,192-token document: about 17 min on this machine (...)'
    when deletion_seconds exceeds NOTICE_S, else None (a page shows it before the run starts). `runs`: the orders
    scored, the score rankings and the random seeds together; `what`: the stage, as the sentence's subject."""
    copies = deletion_copies(runs, ks, flip_bound, len(analysis.encoded.text_positions))
    if copies * COPY_FORWARDS * cost.forward_flops(model, analysis.n) < budget.QUICK_FLOPS:
        return None
    forward = cost.estimate_forward(model, analysis.n)
    seconds = copies * COPY_FORWARDS * forward.seconds
    if seconds <= budget.NOTICE_S:
        return None
    return (f"{what} score up to {copies:,} copies of this {analysis.n:,}-token document: about "
            f"{format_seconds(seconds)} on this machine ({model.device.type}), a copy about one forward, estimated "
            f"from {forward.basis}.")
