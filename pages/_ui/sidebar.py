"""The sidebar every page shares: model, dataset, document, max tokens, the unit every per-token view reads the
document by and the masking options, each bound to the URL so a copied link reopens the same view."""
from __future__ import annotations

import streamlit as st

import longviz_core as lv
from pages._ui import hosting, labels
from pages._ui.current import PAGE_BUDGET_S
from pages._ui.keys import DATASET_KINDS, K

NOT_IN_LINK = ("The address bar is this view's share link, but pasted text is not in it (size, privacy): whoever "
               "opens the link pastes the text again.")


def sidebar() -> None:
    """The controls every page shares. In hosted mode models and datasets come from the lab's list; every
    option is bound to the URL (`bind="query-params"`) so a copied link reopens the same view."""
    ss = st.session_state
    ss.setdefault(K.DOC_SEED, 0)
    cfg = hosting.config()
    with st.sidebar:
        if cfg is not None:
            hosting.sidebar_sources(cfg)
        else:
            st.text_input("Model", value="demo", key=K.MODEL, bind="query-params",
                          help="'demo' (Longformer), 'demo-modernbert' or 'demo-decoder' (Qwen3), a local checkpoint "
                               "directory, or a Hugging Face Hub id.")
            kind = st.selectbox("Dataset", DATASET_KINDS, key=K.DATASET_KIND, bind="query-params")
            if kind == "file path":
                st.text_input("Dataset file (CSV, Parquet, JSONL)", key=K.DATASET_PATH, bind="query-params")
            elif kind == "upload":
                hosting.uploader("Upload a dataset", hosting.DATASET_TYPES, K.DATASET_UPLOAD)
        mode = st.selectbox("Document", hosting.doc_modes(cfg), key=K.DOC_MODE, bind="query-params")
        if mode == "by index":
            st.number_input("Index in the dataset", min_value=0, value=0, step=1, key=K.DOC_INDEX,
                            bind="query-params")
        elif mode.startswith("random"):
            if st.button("Pick another", help="Draw another document of this kind"):
                ss[K.DOC_SEED] += 1
        elif mode == "pasted text":
            st.text_area("Text to analyse", key=K.PASTED, height=160)
            st.caption(NOT_IN_LINK)
        limit = hosting.max_tokens_limit(cfg)
        st.number_input("Max tokens", min_value=16, max_value=limit, value=None, step=256, key=K.MAX_TOKENS,
                        bind="query-params", placeholder="the model's maximum",
                        help="Inputs are <s> + text truncated to max tokens - 2 + </s> (a decoder: its tokenizer's "
                             "own template, e.g. a BOS + text). Empty: the model's maximum "
                             f"when this machine analyses a document that long within {PAGE_BUDGET_S:g} s, else "
                             f"{lv.DEFAULT_MAX_TOKENS:,}; every page says when a text is truncated.")
        st.selectbox("Unit", lv.UNITS, key=K.UNIT, bind="query-params",
                     help="What every per-token view reads the document by. The overlays colour whole units (a "
                          "unit's value is the sum of its tokens'; a click on one selects its first token), the "
                          "attribution tables list units, Agreement compares unit vectors, Faithfulness and "
                          "Explainers delete whole units. Tokens: the paper's view. Heatmap grid and Token counts "
                          "(per-head attention structure) and the dataset-wide tables by token type stay at "
                          "tokens. " + labels.doc_link("units"))
        st.toggle("Masking also hides numbers", value=cfg is not None and cfg.mask_numbers, key=K.MASK_NUMBERS,
                  bind="query-params",
                  help="Beyond the paper's rule (§3.4, which keeps '7' and '1997': they are alphanumeric). Applies "
                       "wherever a page masks.")
        st.text_input("Extra stopwords", value=", ".join(cfg.extra_stopwords) if cfg is not None else "",
                      key=K.EXTRA_STOPWORDS, bind="query-params", placeholder="e.g. et, al",
                      help="Comma-separated words masked as stopwords too, beyond NLTK's list (the paper's rule "
                           "keeps 'et' and 'al'). Applies wherever a page masks.")
