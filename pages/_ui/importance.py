"""Head importance on a page: the definition picker, importance read from a result store or computed by the core,
and the file imported on the heatmap page."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import streamlit as st

import longviz_core as lv
from pages._ui import hosting, labels
from pages._ui.current import current_dataset, max_tokens, serving_store
from pages._ui.keys import K
from pages._ui.shell import progress_bar, queue_notice


@dataclass(frozen=True)
class HeadImportance:
    """The head importance a page scales attention by, and which definition it is (for captions and titles)."""

    values: np.ndarray  # (layers, heads)
    method: str | None  # a key of evaluation.importance.IMPORTANCE_METHODS; None for a file imported on the heatmap page
    name: str  # short, for titles: "Taylor (T3-Vis)"
    description: str  # the definition and its normalisation, for captions

    def settings(self) -> dict:
        """The precompute settings that make a store's head importance this one (for dataset-wide views)."""
        if self.method is None:
            return {"importance_values": self.values}
        return {"importance_method": self.method}


def importance_method(where, page: str) -> str:
    """The head-importance definition picker; T3-Vis's Taylor scores (what the paper used) come first."""
    from longviz_core.evaluation import importance as imp

    return where.selectbox("Head importance definition", list(imp.IMPORTANCE_METHODS),
                           format_func=imp.METHOD_NAMES.get, **K.option(page, "importance_method"),
                           help=" · ".join(imp.IMPORTANCE_METHODS.values()) + ". Computed once per dataset "
                               f"on its first {imp.DEFAULT_EXAMPLES} documents, then read from a result store. "
                               + labels.doc_link("importance"))


def computed_importance(model: lv.LoadedModel, method: str, required: bool = True) -> HeadImportance | None:
    """Head importance by `method` on the current dataset, read from a result store: a precomputed one that serves
    it, else the app's local store (computed there once, with a progress bar). Without a labelled dataset: a
    DatasetError when `required`, else a note and None."""
    from longviz_core.dataset import run
    from longviz_core.dataset.importance import stored_head_importance
    from longviz_core.evaluation import importance as imp

    df = current_dataset(model)
    if df is None or "label" not in df:
        # without any dataset on offer (hosted) no choice in the sidebar helps: say that instead
        offered = hosting.datasets_offered()
        need = "Head importance needs a labelled dataset" + ("" if offered else f", and {hosting.NO_DATASET}")
        if required:
            raise lv.DatasetError(f"{need}: " + ("choose one in the sidebar or " if offered else "")
                                  + "untick the scaling.")
        st.info(f"{need}: only unscaled rows are shown.")
        return None
    settings = run.clamped(model, lv.PrecomputeSettings(max_tokens=max_tokens(model), importance_method=method))
    serving = serving_store(model, df, "head-importance", settings)
    with queue_notice():
        values = stored_head_importance(model, df, settings, serving, progress=progress_bar("Head importance"))
    return HeadImportance(values, method, imp.METHOD_NAMES[method], imp.IMPORTANCE_METHODS[method])


def imported_importance(model: lv.LoadedModel) -> HeadImportance | None:
    """The head-importance file imported on the heatmap page, when there is one that fits this model."""
    values = st.session_state.get(K.IMPORTED_IMPORTANCE) if hosting.uploads_allowed() else None
    if values is None or values.shape != (model.num_layers, model.num_heads):
        return None
    return HeadImportance(values, None, "imported file", "the file imported on the heatmap page")


def head_importance(model: lv.LoadedModel, page: str, where=st, required: bool = True) -> HeadImportance | None:
    """What an attention page scales heads by: the file imported on the heatmap page when there is one (every
    attention page follows it), else importance computed on the dataset by the definition picked in `where`."""
    imported = imported_importance(model)
    if imported is not None:
        return imported
    return computed_importance(model, importance_method(where, page), required)
