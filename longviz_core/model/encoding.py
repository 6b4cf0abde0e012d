"""Text -> model inputs, built exactly as the paper's notebook builds them.

input    = <s> + text tokens[: max_tokens - 2] + </s>
baseline = <s> + <pad> * (n - 2) + </s>                     (Integrated Gradients reference)
position = offset, offset + 1, ...                          (the notebook's cumsum construction on an input
                                                             without pads; offset = padding_idx + 1 for
                                                             RoBERTa-style models, 0 for BERT-style)
global attention on <s> only; attention mask all ones.
A decoder (model/families.DecoderFamily) is given its tokenizer's own template instead of the <s> ... </s> pair
(a `Template`: the special ids before and after the text, e.g. a BOS for Llama and Gemma, nothing for Qwen), its
baseline keeps them and puts the template's filler on every text token, and its positions start at 0.
The same position ids serve the input and the baseline: without them the model would derive the baseline's
positions from its pad tokens and the IG path would not be a straight line in embedding space.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

from ..errors import InputTextError, whole_number

DEFAULT_MAX_TOKENS = 2048


@dataclass(frozen=True)
class Template:
    """A decoder's single-sequence input: the special ids before and after the text, and the baseline's filler."""

    before: tuple[int, ...]
    after: tuple[int, ...]
    filler: int  # the token every text token becomes in the Integrated Gradients baseline


@dataclass(frozen=True)
class Encoded:
    input_ids: np.ndarray  # (n,) int64
    baseline_ids: np.ndarray  # (n,) int64
    position_ids: np.ndarray  # (n,) int64, shared by input and baseline
    global_mask: np.ndarray  # (n,) int64, 1 on <s>
    tokens: list[str] = field(repr=False)  # raw model tokens, e.g. 'Ġtraining'
    n_text_tokens_original: int  # text tokens before truncation
    max_tokens: int
    prefix: int = 1  # special tokens before the text (<s>)
    suffix: int = 1  # special tokens after it (</s>)
    # (n - prefix - suffix, 2) int64: each text token's characters [start, end) in the document (a fast
    # tokenizer's offset_mapping); None where the tokenizer gives none. model.segments maps units through them.
    offsets: np.ndarray | None = field(default=None, repr=False)

    @property
    def n(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def text_positions(self) -> np.ndarray:
        """(n - prefix - suffix,) the positions of the text's tokens: what a deletion test may remove."""
        return np.arange(self.prefix, self.n - self.suffix, dtype=np.int64)

    @property
    def truncated(self) -> bool:
        return self.n_text_tokens_original > self.n - self.prefix - self.suffix

    def torch_inputs(self, device=None, baseline: bool = False) -> dict:
        """Batch-of-one tensors for the model's forward (input ids or the baseline's)."""
        import torch

        ids = self.baseline_ids if baseline else self.input_ids
        as_t = lambda a: torch.as_tensor(a, dtype=torch.long, device=device).unsqueeze(0)  # noqa: E731
        return {
            "input_ids": as_t(ids),
            "attention_mask": as_t(np.ones_like(ids)),
            "global_attention_mask": as_t(self.global_mask),
            "position_ids": as_t(self.position_ids),
        }


def text_hash(text: str) -> str:
    """The document's id in analyses and in a store's `document` table: a SHA-256 prefix. Kept as it is (other
    content hashes are BLAKE2b, in _disk) because stores record it and a resumed store must not mix two ids."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def special_ids(tokenizer) -> tuple:
    """(first, last, pad) token ids: [CLS]/<s>, [SEP]/</s>, [PAD]; Llama-style encoders (EuroBERT) name the first
    two bos and eos. None where the tokenizer has none."""
    cls_id = tokenizer.cls_token_id if tokenizer.cls_token_id is not None else tokenizer.bos_token_id
    sep_id = tokenizer.sep_token_id if tokenizer.sep_token_id is not None else tokenizer.eos_token_id
    return cls_id, sep_id, tokenizer.pad_token_id


def text_token_ids(tokenizer, text: str) -> list[int]:
    """The ids of `text` read as text: a special token's spelling written in the document (`<s>`, `</s>`,
    `<pad>`, `<mask>`, `[CLS]`, …) is split like any other characters, never turned into the special id, so
    the model's own special tokens are only those `encode` adds by position (first and last)."""
    return text_tokens(tokenizer, text)[0]


def text_tokens(tokenizer, text: str) -> tuple[list[int], list[tuple[int, int]] | None]:
    """(text_token_ids, each token's character offsets in `text`): the offsets from a fast tokenizer's
    offset_mapping, None from a tokenizer without them (a slow, Python tokenizer)."""
    offsets = bool(getattr(tokenizer, "is_fast", False))
    out = tokenizer(text, add_special_tokens=False, truncation=False, verbose=False, split_special_tokens=True,
                    **({"return_offsets_mapping": True} if offsets else {}))
    return out["input_ids"], (out["offset_mapping"] if offsets else None)


def encode(
    tokenizer,
    text: str,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    model_max: int | None = None,
    position_offset: int | None = None,
    template: Template | None = None,
) -> Encoded:
    """Tokenise `text` the notebook's way, or in a decoder's `template`.
    `model_max` caps max_tokens (the model's position table)."""
    if not isinstance(text, str):
        raise InputTextError(f"Expected the document as text, got {type(text).__name__}.")
    if not text.strip():
        raise InputTextError("The document is empty (or whitespace only): paste or pick a text to analyse.")
    if "\x00" in text:
        raise InputTextError("The document contains NUL bytes: it looks like binary data, not text.")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:  # lone surrogates, e.g. from a "\ud800" escape in a JSON file
        raise InputTextError(f"The document is not valid Unicode (an unpaired surrogate at character {exc.start}); "
                             "re-save it as UTF-8 text.") from None
    if template is None:
        cls_id, sep_id, pad_id = special_ids(tokenizer)
        if cls_id is None or sep_id is None or pad_id is None:
            raise InputTextError("The tokenizer lacks a CLS/<s>/BOS, SEP/</s>/EOS or pad token; it cannot build the "
                                 "inputs.")
        before, after = (cls_id,), (sep_id,)
    else:
        before, after, pad_id = template.before, template.after, template.filler
    specials = len(before) + len(after)
    what = ("max_tokens (<s>, at least one token, </s>)" if template is None
            else f"max_tokens ({specials} special tokens and at least one text token)")
    max_tokens = whole_number(max_tokens, what, lo=specials + 1, error=InputTextError)
    if model_max is not None and max_tokens > model_max:
        raise InputTextError(f"max_tokens={max_tokens} exceeds what this model accepts ({model_max} tokens).")
    text_ids, offsets = text_tokens(tokenizer, text)
    if not text_ids:
        raise InputTextError("The document produced no tokens.")
    kept = text_ids[: max_tokens - specials]
    n = len(kept) + specials
    input_ids = np.asarray([*before, *kept, *after], dtype=np.int64)
    baseline_ids = np.asarray([*before, *[pad_id] * len(kept), *after], dtype=np.int64)
    if position_offset is None:
        position_offset = pad_id + 1
    position_ids = np.arange(position_offset, position_offset + n, dtype=np.int64)
    global_mask = np.zeros(n, dtype=np.int64)
    global_mask[0] = 1
    tokens = tokenizer.convert_ids_to_tokens(input_ids.tolist())
    return Encoded(
        input_ids=input_ids,
        baseline_ids=baseline_ids,
        position_ids=position_ids,
        global_mask=global_mask,
        tokens=list(tokens),
        n_text_tokens_original=len(text_ids),
        max_tokens=max_tokens,
        prefix=len(before),
        suffix=len(after),
        offsets=None if offsets is None else np.asarray(offsets[: len(kept)], dtype=np.int64).reshape(-1, 2),
    )
