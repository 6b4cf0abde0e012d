"""Integrated Gradients on a page: the steps picker within a server's cap, and IG of the predicted class from the
disk cache or after a time estimate and a click."""
from __future__ import annotations

import longviz_core as lv
from pages._ui import hosting
from pages._ui.keys import K
from pages._ui.shell import progress_bar, queue_notice, run_when_clicked

LOCAL_MAX_IG_STEPS = 5000


def max_ig_steps() -> int:
    """The most Integrated Gradients steps a page may ask for: a hosted server's `max_ig_steps`, else 5,000."""
    return hosting.max_ig_steps(hosting.config(), LOCAL_MAX_IG_STEPS)


def ig_steps_picker(col, page: str, name: str = "steps", custom: bool = False, label: str = "IG steps") -> int:
    """An IG steps selectbox in `col` offering the presets within max_ig_steps() (presets above a hosted cap
    give way to one at the cap) and, with `custom`, a number input for any count up to the cap."""
    from longviz_core.attribution import STEP_PRESETS

    cap = max_ig_steps()
    presets = {label: n for label, n in STEP_PRESETS.items() if n <= cap}
    if len(presets) < len(STEP_PRESETS):
        presets[f"{cap} steps (this server's limit)"] = cap
    choice = col.selectbox(label, [*presets, *(["custom"] if custom else [])], **K.option(page, name))
    if choice in presets:
        return presets[choice]
    return int(col.number_input("Custom steps", 2, cap, min(100, cap), **K.option(page, name + "_n")))


def attribution_after_click(model: lv.LoadedModel, analysis, steps: int, page: str, label: str, note: str = ""):
    """IG of the predicted class: from the disk cache, or after an honest time estimate and a click on `label`."""
    from longviz_core import attribution as attr
    from longviz_core.attribution.budget import cached_or_estimate
    from longviz_core.attribution.cost import estimate_basis
    from longviz_core.progress import format_seconds

    with queue_notice():
        hit, seconds = cached_or_estimate(model, analysis, steps)
    if hit is not None:
        return hit
    run_when_clicked(f"Integrated Gradients with {steps} steps on {analysis.n:,} tokens takes about "
                     f"{format_seconds(seconds)} on this machine ({model.device.type}; "
                     f"{estimate_basis(model, analysis.n)}).{note}", label, K.page(page, "run_ig"))
    with queue_notice():
        return attr.integrated_gradients(model, analysis, None, steps, progress=progress_bar("Integrated Gradients"))
