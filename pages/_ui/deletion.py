"""The deletion test's stages on a page: its numbers as far as they are known, the first flips within the bound and
the exact scan to the end in background threads (through the compute queue, so in hosted mode they wait their
turn like IG), each shown by a fragment that refreshes its progress while the rest of the page (the curves' numbers
and charts) and the app stay usable. The bounded scan starts by itself and redraws the page when it ends; the exact
scan starts on demand, with an upper bound of the time left and a Stop button. A scan is shared by every session
that asks for the same one (runtime.JOBS): Stop ends this session's following, and the scan only when no other
session follows it."""
from __future__ import annotations

import uuid

import pandas as pd
import streamlit as st

from longviz_core.progress import format_seconds
from longviz_core.runtime import JOBS
from longviz_core.evaluation.deletion import FLIP_BOUND, LODDS_UNDEFINED, NO_THRESHOLD
from longviz_core.figures import faithfulness as fig
from pages._ui import shell
from pages._ui.keys import K

REFRESH_S = 2.0


def _watcher() -> str:
    """This session's id as a watcher of shared scans (runtime.SharedJob)."""
    return st.session_state.setdefault(K.page("deletion", "watcher"), uuid.uuid4().hex)


def head_settings(model, page: str, analysis, where=st) -> float | None:
    """What the deletion test explains, in words, and the regression threshold (a number input; empty = no
    decision, so no flips): the threshold, or None."""
    where.caption(f"Explained: {analysis.explained_name()} · the model is {model.head.words}. "
                  + model.head.deletion_words)
    if not model.head.regression:
        return None
    threshold = where.number_input("Score threshold for decision flips (empty: none)", value=None, format="%.4f",
                                   key=K.page(page, "threshold"),
                                   help="A regression head decides nothing by itself: a flip is the score crossing "
                                        "this threshold (score ≥ threshold on one side). Empty: no flips to find.")
    if threshold is None:
        where.caption(f"No threshold: {NO_THRESHOLD}.")
    return threshold


def replacement_picker(model, page: str, where=st) -> str:
    """What a removed token becomes, among the replacements this model's tokenizer has a token for (a decoder
    often has no mask or pad token); a remembered choice the model lacks gives way to the first it has."""
    from longviz_core.evaluation.deletion_engine import replacement_id, replacements_for

    options = replacements_for(model)
    key = K.page(page, "replacement")
    if st.session_state.get(key) not in options:
        st.session_state.pop(key, None)
    tokens = {r: model.tokenizer.convert_ids_to_tokens(replacement_id(model, r)) for r in options}
    return where.radio("Replace removed tokens by", options, **K.option(page, "replacement"), horizontal=True,
                       format_func=lambda r: tokens[r] if r != "baseline" else f"IG baseline ({tokens[r]})",
                       help="The mask or pad token, or the token Integrated Gradients' baseline puts on every text "
                            "token (pad for encoders; a decoder's pad, else unk, else eos).")


def numbers(result, name: str, model, meta, pending: str | None = None) -> None:
    """The result's table, one column per ranking and one row per number (every number fits the page; the CSV
    keeps a row per ranking), and each unflipped run's flip in words; `pending`: the flips are not scanned yet."""
    shown = result.numbers(flips=not pending)
    wide = fig.document_numbers(shown, result.table().set_index("ranking")["no_flip_within"], result.unit)
    right = {c: st.column_config.TextColumn(alignment="right") for c in shown.index}  # numbers, as text
    if pending:  # drawn again once the flips are known: no download button yet (one per page run)
        st.dataframe(wide, hide_index=True, column_config=right)
        st.caption(pending)
        return
    shell.table(wide, name, model, meta, download=shown.reset_index(), column_config=right)
    if not result.lodds_defined:
        st.caption(LODDS_UNDEFINED)
    if not result.flips_defined:
        st.caption(f"Without a score threshold: {NO_THRESHOLD}.")
    m, held = result.n_removable, {}
    for run in result.runs:  # one line per "no flip …" text, naming every run it holds for
        if run.flip_removed is None and run.flips:
            held.setdefault(run.flip_text(m, result.unit), []).append(
                result.label(run) + ("" if run.seed is None else f" (seed {run.seed})"))
    for text, names in held.items():
        st.caption(f"The prediction holds, {text}: {', '.join(names)}.")
    what = "text tokens" if result.unit == "token" else f"{result.unit}s"
    st.caption(f"{result.forward_passes:,} perturbed copies scored in {result.seconds:.1f} s "
               f"({result.copies_needed:,} without sharing) · removed tokens replaced by {result.replacement} · "
               f"{m:,} removable {what}.")


def left_of(known) -> tuple[int, float]:
    """(copies the exact scan may still need, seconds per copy measured) from a DeletionResult or leaderboard runs
    (rows in evaluation.deletion's schema with `n`)."""
    if isinstance(known, pd.DataFrame):
        open_ = known[~known["settled"].astype(bool)]
        left = int((open_["n"] - 2 - open_["scanned"]).sum())
        return left, float(known["deletion_seconds"].sum()) / max(1, int(known["copies"].sum()))
    left = sum(known.n_removable - r.scanned for r in known.runs if r.flip_removed is None)
    return left, known.seconds / max(1, known.forward_passes)


FLIPS = "flips:"  # the bounded scans' keys in runtime.JOBS (the exact scans' keys have no prefix)


def flips_stage(page: str, key: str, work, unit: str = "token"):
    """The first flips within the bound, started at once in the background (`work(progress, stop)`, shared by
    `key`): their result once the scan is over; else None, and a fragment here shows its progress and redraws the
    page when it ends. A scan that failed raises its error again (the page's guard shows it). It has no Stop: it is
    bounded (FLIP_BOUND counts of `unit`s per ranking), and what it scores is kept for the exact scan."""
    me, key = _watcher(), FLIPS + key
    job = JOBS.get(key)
    if job is not None and not job.running:
        if job.error is not None:
            raise job.error
        return job.result
    JOBS.follow(key, work, me)
    _watch(page + "_flips", key, me, stop=False, unit=unit)
    return None


def exact_stage(page: str, key: str, work, left: int, seconds_per_copy: float):
    """The exact scan of every unfinished first flip, on demand: a button (with the `left` copies it may take at
    most and that time at `seconds_per_copy`), then the worker's progress and Stop in a fragment; returns the
    finished (or stopped) result, or None while there is none.

    A scan is shared by key (`work` computes the same numbers for every session asking for them): a session that
    asks for a running scan follows it; Stop ends this session's following, and the scan itself only when no
    other session follows it (runtime.SharedJob); a session that stopped may follow it again while it runs."""
    me, job = _watcher(), JOBS.get(key)
    if job is not None and not job.running:
        if job.error is not None:
            st.error(f"The exact scan failed: {job.error}")
            return None
        if not job.cancelled:
            return job.result
    if job is not None and job.running and (job.watched_by(me) or job.cancelled):
        _watch(page, key, me)
        return None
    if not left:
        return None
    stopped = job is not None and not job.running and job.result is not None
    elsewhere = job is not None and job.running  # followed by other sessions only (the cases above return)
    cost = (f"Scanning every remaining count exactly takes at most {left:,} more copies (about "
            f"{format_seconds(left * seconds_per_copy)} here; less when decisions flip early). It runs in the "
            "background: this page keeps its numbers and other pages stay usable.")
    if elsewhere:
        st.info("This exact scan is running for another session: following it costs nothing more, and its result "
                "shows here once it ends (a Stop here ends only this page's following). " + cost)
    else:
        st.info(f"{'Stopped: every count scored so far is kept. ' if stopped else ''}{cost}")
    label = "Follow the running exact scan" if elsewhere else "Scan to the end (exact first flips)"
    if st.button(label, key=K.page(page, "exact")):
        JOBS.follow(key, work, me)
        _watch(page, key, me)
        return None
    return job.result if stopped else None


def _watch(page: str, key: str, me: str, stop: bool = True, unit: str = "token") -> None:
    """The fragment following job `key`: its progress (and a Stop button if `stop`) while it runs, then one rerun
    of the whole page, which draws the result."""
    shown = K.page(page, "exact_shown")
    name = "Exact scan" if stop else f"First flips within the first {FLIP_BOUND} {unit}s"

    @st.fragment(run_every=REFRESH_S)
    def panel() -> None:
        job = JOBS.get(key)
        if job is None:
            return
        if job.running and job.watched_by(me):
            st.progress(min(max(job.fraction, 0.0), 1.0), text=f"{name}: {job.message}")
            if stop and st.button("Stop", key=K.page(page, "exact_stop"),
                                  help="Stops this page's following; the scan ends unless another session follows it."):
                job.detach(me)
                st.rerun(scope="app")  # the page without the panel: stopping, or still running for others
        elif job.running:  # cancelled: it ends at its next progress report, keeping every count scored
            st.progress(min(max(job.fraction, 0.0), 1.0), text=f"{name}: stopping …")
        elif st.session_state.get(shown) != id(job):
            st.session_state[shown] = id(job)
            st.rerun(scope="app")  # the page draws the finished numbers

    panel()


__all__ = ["exact_stage", "flips_stage", "left_of", "numbers"]
