"""The one import pages use for what they share: the page shell (shell), the sidebar (sidebar), the current model,
dataset, document and analysis (current), Integrated Gradients on a page (ig) and head importance (importance);
the session-state keys (K, in pages/_ui/keys.py) too.

Pages import this module; the modules it gathers only arrange widgets and call the core."""
from pages._ui.current import (
    PAGE_BUDGET_S,
    current_analysis,
    current_dataset,
    current_document,
    current_model,
    dataset_probs,
    default_max_tokens,
    export_settings,
    mask_options,
    max_tokens,
    positive_class,
    serving_store,
)
from pages._ui.ig import LOCAL_MAX_IG_STEPS, attribution_after_click, ig_steps_picker, max_ig_steps
from pages._ui.importance import (
    HeadImportance,
    computed_importance,
    head_importance,
    importance_method,
    imported_importance,
)
from pages._ui.keys import DATASET_KINDS, DOC_MODES, K
from pages._ui.shell import (
    NO_ARROW,
    PAGE_STYLE,
    WHOLE_TABLE_ROWS,
    guard,
    page_style,
    progress_bar,
    queue_notice,
    queued,
    run_through_app,
    run_when_clicked,
    table,
    wrappable,
)
from pages._ui.sidebar import NOT_IN_LINK, sidebar

__all__ = [
    "DATASET_KINDS", "DOC_MODES", "K", "LOCAL_MAX_IG_STEPS", "NOT_IN_LINK", "NO_ARROW", "PAGE_BUDGET_S", "PAGE_STYLE",
    "WHOLE_TABLE_ROWS", "HeadImportance", "attribution_after_click", "computed_importance", "current_analysis",
    "current_dataset", "current_document", "current_model", "dataset_probs", "default_max_tokens", "export_settings",
    "guard", "head_importance", "ig_steps_picker", "importance_method", "imported_importance", "mask_options",
    "max_ig_steps", "max_tokens", "page_style", "positive_class", "progress_bar", "queue_notice", "queued", "run_through_app",
    "run_when_clicked", "serving_store", "sidebar", "table", "wrappable",
]
