"""Once per server process: the libraries every page needs imported, then set aside from the garbage collector.

Streamlit runs a full garbage collection after every script run (`runner.postScriptGC`), every click and every
refresh of a fragment included. With the libraries the pages use imported (torch, transformers, captum, altair,
pandas, scipy, nltk, numba), that pass walks some 555,000 long-lived objects (classes, functions, modules, their
dicts): 0.25 s of CPU per run on an idle core, 18 % of the server's CPU in the browser walks (py-spy).
`gc.freeze()` moves the objects alive at that moment into the permanent generation, which collections skip;
everything created later (models, analyses, sessions' results) is collected as before. app.py calls it after the
sidebar and before the page, so in a server no model is loaded yet and none can be frozen (a frozen object left in
an unreachable cycle would stay in memory). The first page of a fresh server imports nltk, numba and scipy.stats
here, about 1.2 s, which the Attribution page would otherwise import. Measured: a full collection after loading
the demo went from 0.276 s to 0.004 s (benchmarks/longformer_mask.py)."""
from __future__ import annotations

import gc
import threading

_LOCK = threading.Lock()
_done = False


def import_libraries() -> None:
    """Import what a model's loading and the pages import (transformers imports torch's compiler stack, sympy
    among it, when it builds a model)."""
    import altair  # noqa: F401
    import captum.attr  # noqa: F401
    import nltk  # noqa: F401  (units: sentences)
    import numba  # noqa: F401  (the compiled loops)
    import pandas  # noqa: F401
    import scipy.stats  # noqa: F401  (agreement)
    import torch._dynamo  # noqa: F401
    import transformers.modeling_utils  # noqa: F401
    from transformers import AutoModelForSequenceClassification, AutoTokenizer  # noqa: F401


def settle() -> None:
    """The libraries imported, what is garbage now collected, the rest frozen. Once; later calls return."""
    global _done
    if _done:
        return
    with _LOCK:
        if _done:
            return
        import_libraries()
        gc.collect()
        gc.freeze()
        _done = True
