"""Attribution tables: pure functions of a document's tokens and its score vector (IG's normalised scores).

Single tokens (top_attributions, Fig 10a/b), sums per token type (attribution_by_token, Fig 10c/d), one
document's share of the dataset-wide table (document_token_sums, Fig 10e/f; dataset.aggregate combines them)
and one token's numbers for the UI (token_detail). Token types are `tokens.token_label`: the readable token
without its word-start marker, case kept (the counts' types are lower-cased; these tables show what the model
saw).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..attribution.ig import Attribution
from ..errors import (
    AttributionError,
    SelectionError,
    SettingsError,
    finite_vector,
    whole_number,
)
from ..model.analysis import DocumentAnalysis
from ..model.segments import Segments
from ..tokens import token_label
from .masking import build_mask, special_mask
from .units import Unit, units


def top_attributions(tokens, scores, k: int = 10, sign: str = "positive", mask=None,
                     unit: Unit | Segments = "token") -> pd.DataFrame:
    """The k most positive (or negative) single tokens: columns token, position, attribution (Fig 10a/b). With
    unit="word" or a document's Segments (model.segments.segment: words, sentences, paragraphs), units
    (views.units: a unit's attribution is the sum of its tokens', a unit is left out only if all its tokens are
    masked): columns word (sentence, paragraph: its text on one line), position (its first token), attribution."""
    if sign not in ("positive", "negative"):
        raise SettingsError(f"sign must be 'positive' or 'negative', got {sign!r}.")
    k = whole_number(k, "k (rows shown)", lo=1)
    scores = _scores(tokens, scores)
    shown = units(tokens, scores, ~_keep(len(scores), mask), unit)
    vals = shown.values  # (units,)
    pos = np.flatnonzero(~shown.masked & (vals > 0 if sign == "positive" else vals < 0))
    order = pos[np.argsort(-vals[pos] if sign == "positive" else vals[pos], kind="stable")][:k]
    return pd.DataFrame(
        {shown.unit: [shown.labels[i] for i in order], "position": shown.positions[order].astype(np.int64),
         "attribution": vals[order]}
    )


def attribution_by_token(tokens, scores, mask=None) -> pd.DataFrame:
    """Attributions summed per token type over the document (Fig 10c/d): columns token, attribution, count,
    sorted by attribution (descending). A token type is the token's text without its word-start marker
    (so 'Ġalgorithms' and 'algorithms' are one type; case is kept)."""
    scores = _scores(tokens, scores)
    keep = _keep(len(scores), mask)
    df = pd.DataFrame({"token": [token_label(t) for t in tokens], "attribution": scores})[keep]
    out = df.groupby("token", sort=False)["attribution"].agg(["sum", "size"]).reset_index()
    out.columns = ["token", "attribution", "count"]
    return out.sort_values("attribution", ascending=False, kind="stable").reset_index(drop=True)


def document_token_sums(tokens, scores, special_tokens) -> pd.DataFrame:
    """One document's share of the dataset-wide table (Fig 10e/f), as the precompute stores it: per token type
    (as attribution_by_token), with `special_tokens` always left out, the summed score and the occurrences
    (columns attribution, count), and the same under the paper's mask (views.masking.build_mask: special,
    non-alphanumeric, stopwords) in attribution_unmasked, count_unmasked (count 0: every occurrence masked)."""
    special = special_mask(tokens, special_tokens)
    by_token = attribution_by_token(tokens, scores, mask=special)
    kept = attribution_by_token(tokens, scores, mask=special | build_mask(tokens, special_tokens=special_tokens))
    by_token = by_token.merge(kept.rename(columns={"attribution": "attribution_unmasked", "count": "count_unmasked"}),
                              on="token", how="left")
    return by_token.fillna({"attribution_unmasked": 0.0, "count_unmasked": 0}).astype({"count_unmasked": "int64"})


def token_detail(analysis: DocumentAnalysis, attribution: Attribution, position: int, received=None) -> dict:
    """One token's numbers for the UI: text, position, attribution and its rank (1 = most positive),
    received attention (summed over all layers and heads unless `received` (n,) is given) and its rank."""
    n = analysis.n
    if attribution.n != n:
        raise AttributionError(f"The attribution has {attribution.n} tokens, the document {n}: attribute this "
                               "document's analysis (integrated_gradients(model, analysis)).")
    if not 0 <= int(position) < n:
        raise SelectionError(f"Token position {position} is out of range: this document has positions 0..{n - 1}.")
    position = int(position)
    att = analysis.attention.received() if received is None else np.asarray(received, dtype=np.float64)
    return {
        "token": token_label(analysis.tokens[position]),
        "raw_token": analysis.tokens[position],
        "position": position,
        "attribution": float(attribution.scores[position]),
        "attribution_rank": _rank_of(attribution.scores, position),
        "abs_attribution_rank": _rank_of(np.abs(attribution.scores), position),
        "received_attention": float(att[position]),
        "attention_rank": _rank_of(att, position),
        "n": n,
    }


def _scores(tokens, scores) -> np.ndarray:
    s = finite_vector(np.asarray(scores).reshape(-1), "The attribution scores", AttributionError)
    if s.shape[0] != len(tokens):
        raise AttributionError(f"{len(tokens)} tokens but {s.shape[0]} scores: give the tokens and the "
                               "attribution scores of one document.")
    return s


def _keep(n, mask) -> np.ndarray:
    if mask is None:
        return np.ones(n, dtype=bool)
    m = np.asarray(mask, dtype=bool).reshape(-1)
    if m.shape[0] != n:
        raise SettingsError(f"{n} tokens but a mask of {m.shape[0]}: build the mask from these tokens "
                            "(build_mask(tokens)).")
    return ~m


def _rank_of(values, position) -> int:
    """1-based rank of values[position] in descending order (ties share the best rank)."""
    v = np.asarray(values, dtype=np.float64)
    return int(np.count_nonzero(v > v[position])) + 1
