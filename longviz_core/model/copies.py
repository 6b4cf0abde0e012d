"""Perturbed copies of one document, scored in batches: the token a removed token becomes, how many copies share a
forward, and that forward. The deletion test (evaluation.deletion_engine) and the perturbation explainers
(attribution.perturbation) score their copies here, so both perturb and run every family the same way."""
from __future__ import annotations

import torch

from ..errors import LongvizError, SettingsError
from .encoding import Encoded
from .loading import LoadedModel

# what a removed token becomes: the mask or pad token, or "baseline": the token Integrated Gradients' baseline puts
# on every text token (pad for the encoders, a decoder's filler: pad, else unk, else eos; many decoders have no
# mask or pad token)
REPLACEMENTS: tuple[str, ...] = ("mask", "pad", "baseline")
BATCH_SIZE = 8
SINGLE_THREAD_TOKENS = 2048  # a batch's tokens on a one-thread CPU (default_batch_size)


def replacement_id(model: LoadedModel, replacement: str, error: type[LongvizError] = SettingsError) -> int:
    """The token id a removed token becomes (REPLACEMENTS); `error` when the tokenizer has no such token."""
    if replacement not in REPLACEMENTS:
        raise error(f"replacement must be one of {REPLACEMENTS}, got {replacement!r}")
    token_id = _replacement_ids(model).get(replacement)
    if token_id is None:
        raise error(f"The tokenizer has no {replacement} token; choose one of "
                    f"{', '.join(replacements_for(model))}.")
    return int(token_id)


def replacements_for(model: LoadedModel) -> tuple[str, ...]:
    """The REPLACEMENTS this model's tokenizer has a token for, in REPLACEMENTS' order."""
    ids = _replacement_ids(model)
    return tuple(r for r in REPLACEMENTS if ids.get(r) is not None)


def _replacement_ids(model: LoadedModel) -> dict:
    tok = model.tokenizer
    baseline = tok.pad_token_id if model.template is None else model.template.filler
    return {"mask": tok.mask_token_id, "pad": tok.pad_token_id, "baseline": baseline}


def default_batch_size(model: LoadedModel, n: int | None = None) -> int:
    """Copies per forward of an `n`-token document: BATCH_SIZE, except on a CPU running one torch thread, where a
    long copy costs the same alone or batched and copies go one at a time, while short ones still share a forward's
    fixed cost (the model's Python and its small matrix products): there a batch holds up to SINGLE_THREAD_TOKENS
    tokens. Measured on the demo with one thread (docs/benchmarks.md "Faithfulness"): per copy 22.9 ms alone and
    9.2 ms in a batch of 8 at 128 tokens, 27.3 and 15.4 ms at 256, 47.3 and 34.3 ms (batch 4) at 512, 90.9 and
    83.6 ms at 1,024; with two threads a lone copy cost 3-4x one in a batch of 8; a GPU needs batches to be used."""
    single_thread_cpu = torch.device(model.device).type == "cpu" and torch.get_num_threads() == 1
    if not single_thread_cpu:
        return BATCH_SIZE
    return 1 if n is None else max(1, min(BATCH_SIZE, SINGLE_THREAD_TOKENS // max(int(n), 1)))


def copy_logits(model: LoadedModel, enc: Encoded, ids) -> torch.Tensor:
    """(B, classes) float64 logits of B copies of the document `enc`, `ids` (B, n) their input ids: the
    document's positions, attention and global masks kept (Family.inputs), one forward, no gradient."""
    inputs = model.family.inputs(enc, model.device, ids=ids)
    with torch.no_grad():
        return model(**inputs).logits.double()


__all__ = ["BATCH_SIZE", "REPLACEMENTS", "SINGLE_THREAD_TOKENS", "copy_logits", "default_batch_size", "replacement_id", "replacements_for"]
