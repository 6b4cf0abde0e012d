"""At load: longviz's attention route checked against the model's own eager attention on a short probe.

Models whose attention longviz reads through transformers' attention interface (`model/capture.py`: every
family but Longformer and BigBird, which have routes of their own) are run once on a probe of a few dozen tokens
twice: through longviz's route (its masks, its streamed or banded layers) and through transformers' eager
implementation with `output_attentions`. Every layer's and head's weights must agree to float32 rounding, and so
must the logits; otherwise the model is refused with the layer, head and difference, never shown with other
weights than it applies (a custom attention, a scaling or cap longviz does not apply, a mask it reads wrongly).
"""
from __future__ import annotations

import numpy as np
import torch

from ..errors import ModelLoadError
from .encoding import Encoded

PROBE_TOKENS = 32  # at least; a sliding window up to _WINDOW_PROBE tokens is exceeded by the probe
_WINDOW_PROBE = 256
# float32 softmax of the same scores, rounded in another order: a few ulp of values <= 1
ATTENTION_TOLERANCE = 1e-4


class AttentionMismatchError(ModelLoadError):
    """The attention longviz computes for this model is not the attention the model applies."""


def probe(loaded, n: int) -> Encoded:
    """n tokens: the model's special tokens around text ids spread over the vocabulary (no special ids)."""
    tok = loaded.tokenizer
    t = loaded.template
    before, after = (t.before, t.after) if t is not None else (
        (tok.cls_token_id if tok.cls_token_id is not None else tok.bos_token_id,),
        (tok.sep_token_id if tok.sep_token_id is not None else tok.eos_token_id,))
    specials = set(tok.all_special_ids)
    vocab = np.asarray([i for i in range(len(tok)) if i not in specials], dtype=np.int64)
    body = vocab[np.linspace(0, len(vocab) - 1, max(1, n - len(before) - len(after))).astype(np.int64)]
    ids = np.asarray([*before, *body, *after], dtype=np.int64)
    off = loaded.position_offset
    return Encoded(input_ids=ids, baseline_ids=ids, position_ids=np.arange(off, off + len(ids), dtype=np.int64),
                   global_mask=np.eye(1, len(ids), dtype=np.int64)[0], tokens=[""] * len(ids),
                   n_text_tokens_original=len(body), max_tokens=len(ids), prefix=len(before), suffix=len(after))


def check_reproduced(loaded) -> None:
    """AttentionMismatchError unless longviz's route gives the model's eager attention and logits on a probe."""
    from .capture import analyze_layers, implementation

    family = loaded.family
    if not family.attention_interface:
        return
    patterns = family.attention_patterns(loaded.max_tokens)
    reach = max((p.radius for p in patterns), default=0)
    n = min(loaded.max_tokens, max(PROBE_TOKENS, reach + 9 if reach < _WINDOW_PROBE else 0))
    enc = probe(loaded, n)
    inputs = family.inputs(enc, loaded.device)
    try:
        with torch.no_grad():
            with implementation(loaded.model, "eager"):
                eager = loaded(**inputs, output_attentions=True)
            ours, attention = analyze_layers(loaded, inputs, family.attention_patterns(enc.n))
    except ModelLoadError:
        raise
    except Exception as exc:  # AttentionPatternError and whatever a custom attention raises
        raise AttentionMismatchError(f"'{loaded.source}': longviz cannot reproduce this model's attention "
                                     f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}).") \
            from exc
    weights = getattr(eager, "attentions", None)
    if not weights or len(weights) != attention.num_layers:
        raise AttentionMismatchError(f"'{loaded.source}' returns no attention weights from its eager "
                                     "implementation for every layer, so longviz cannot check what it shows.")
    for layer, w in enumerate(weights):
        w = w[0].float().cpu().numpy()  # (heads, n, n)
        for head in range(w.shape[0]):
            diff = float(np.abs(attention.dense(layer, head) - w[head]).max())
            if not diff <= ATTENTION_TOLERANCE:
                raise AttentionMismatchError(
                    f"'{loaded.source}': in layer {layer + 1}, head {head + 1} longviz's attention differs from the "
                    f"model's own by up to {diff:.2g} (on a {enc.n}-token probe), so longviz cannot show this "
                    "model's attention.")
    gap = float((ours.logits.float() - eager.logits.float()).abs().max())
    scale = 1.0 + float(eager.logits.float().abs().max())
    if not gap <= ATTENTION_TOLERANCE * scale:
        raise AttentionMismatchError(f"'{loaded.source}': through longviz's attention the logits move by {gap:.2g} "
                                     "from the model's own, so longviz cannot explain this model.")
