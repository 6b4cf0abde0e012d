"""Model families: the one place that knows how a family of encoders is called, read and attributed.

A `Family` answers, for a loaded sequence classifier: its forward inputs from an `Encoded` (Longformer's global
attention mask or not) and the length the model really runs at, the embeddings layer Integrated Gradients
attaches to, the encoder layers and their attention modules, each head's share of the attention parameters
(head importance), what the classification head reads (the <s>/[CLS] row or the mean of all rows), the longest
input and each layer's attention pattern (banded with radius w, banded + global columns, full, block-sparse).

Families (config.model_type):
  longformer                 banded + global <s>, radius attention_window[l] // 2; word + position embeddings
  modernbert, ultrabert      sliding layers banded with radius config.sliding_window (ModernBERT:
                             local_attention // 2), `layer_types` marks the full layers; RoPE, so IG attaches to
                             the token embeddings table; classifier_pooling "cls" or "mean"
  big_bird                   block-sparse (global, sliding and random blocks; full attention below
                             (5 + 2 r) * block_size tokens, as transformers runs it) or original_full, as the
                             config names; word + position embeddings
  anything else              full attention (BERT, RoBERTa, EuroBERT, GTE, ...): the `embeddings` module where
                             there is one (BERT/RoBERTa: word + position + type), else the token table (RoPE)
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch

from ..errors import LongvizError, ModelLoadError

BANDED_GLOBAL, BANDED, FULL, BLOCK_SPARSE = "banded+global", "banded", "full", "block-sparse"
# Architectures whose position ids start after padding_idx (RoBERTa family); others start at 0.
_ROBERTA_STYLE = {"longformer", "roberta", "xlm-roberta", "camembert", "xlm-roberta-xl", "data2vec-text"}


class FamilyLayoutError(LongvizError, ValueError):
    """The loaded model does not have the module layout its family should have (a custom or changed class)."""


@dataclass(frozen=True)
class LayerPattern:
    """Which keys a layer's queries attend to."""

    kind: str  # BANDED_GLOBAL | BANDED | FULL | BLOCK_SPARSE
    radius: int  # one-sided window w of the banded kinds (|i - j| <= w); 0 otherwise
    keys: int  # keys one query scores: what its attention costs in memory

    def describe(self, layer: int) -> str:
        """One sentence for a figure's caption about layer `layer` (0-based; shown 1-based)."""
        if self.kind in (BANDED_GLOBAL, BANDED):
            text = f"The diagonal band is layer {layer + 1}'s sliding window (±{self.radius} tokens)"
            return text + ("; the first row and column are the global <s> token." if self.kind == BANDED_GLOBAL
                           else ".")
        if self.kind == BLOCK_SPARSE:
            return (f"Layer {layer + 1} attends in blocks: the first and last blocks globally, the others to a sliding "
                    "window of three blocks, the two global blocks and random blocks (in eval mode transformers "
                    "draws none: each is the first block, counted again).")
        return f"Layer {layer + 1} attends over the whole document (no sliding window)."


@dataclass(frozen=True)
class HeadParameters:
    """One layer's attention parameters split by head (T3-Vis's S(l, h)) and the projection whose input holds the
    heads' outputs side by side (where Michel et al.'s gates go)."""

    slices: tuple  # ((parameter, axis, blocks), ...): axis = blocks x heads x head_dim, head h its middle index
    output: torch.nn.Linear  # W_O: input (..., heads * head_dim), head h = its h-th slice


class Family:
    """A full-attention encoder (BERT, RoBERTa, EuroBERT, GTE, ...); the other families override what differs."""

    name = "full-attention"
    global_tokens = False  # the forward takes a global_attention_mask (Longformer)
    # attention goes through transformers' AttentionInterface, so model/capture.py sees each layer's Q and K
    attention_interface = True

    def __init__(self, config, source: str = "") -> None:
        self.config, self.source = config, source

    # ---- sizes and inputs -----------------------------------------------------------------------------------
    @property
    def position_offset(self) -> int:
        """First position id (padding_idx + 1 for RoBERTa-style position tables, 0 otherwise)."""
        return (int(self.config.pad_token_id) + 1) if self.config.model_type in _ROBERTA_STYLE else 0

    @property
    def max_tokens(self) -> int:
        return int(getattr(self.config, "max_position_embeddings", 512)) - self.position_offset

    @property
    def windows(self) -> tuple[int, ...]:
        """Each layer's one-sided Longformer window (() for other families)."""
        return ()

    @property
    def pooling(self) -> str:
        """What the classification head reads: "cls" (the first token's final state) or "mean" (all tokens')."""
        how = str(getattr(self.config, "classifier_pooling", "cls") or "cls")
        return "cls" if how in ("cls", "bos") else "mean"

    def readout(self, n: int) -> np.ndarray:
        """(n,) weights of the rows the head reads: e_0 for "cls" pooling, 1/n everywhere for "mean"."""
        if self.pooling == "mean":
            return np.full(n, 1.0 / n)
        v = np.zeros(n)
        v[0] = 1.0
        return v

    def padded_length(self, n: int) -> int:
        """The length the model runs a document of n tokens at (it pads inside its forward)."""
        return int(n)

    def kwargs(self, input_ids, attention_mask, position_ids, global_mask=None) -> dict:
        """The forward's keyword arguments from batched (B, n) tensors."""
        out = {"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids}
        if self.global_tokens:
            out["global_attention_mask"] = global_mask
        return out

    def inputs(self, enc, device=None, ids=None) -> dict:
        """Forward arguments for an Encoded document; `ids` (B, n), if given, replaces its input ids (perturbed
        copies share its positions and masks)."""
        one = enc.torch_inputs(device)
        if ids is None:
            ids = one["input_ids"]
        ids = torch.as_tensor(ids, dtype=torch.long, device=device)
        rep = lambda t: t.repeat(ids.shape[0], 1)  # noqa: E731  (B, n)
        return self.kwargs(ids, rep(one["attention_mask"]), rep(one["position_ids"]),
                           rep(one["global_attention_mask"]))

    @contextmanager
    def running(self, net, n: int):
        """Context of every forward of n tokens (hooks on attention modules go on inside it): sets up and
        afterwards restores whatever such a forward changes on the shared model."""
        yield

    def check(self) -> None:
        """ModelLoadError when the config cannot work (before the model is built)."""

    # ---- modules ----------------------------------------------------------------------------------------
    def base(self, net):
        return getattr(net, "base_model", net)

    def embeddings(self, net) -> torch.nn.Module:
        """The layer Integrated Gradients attributes to: the whole embeddings module where the family has one
        (BERT/RoBERTa: word + position + token type, LayerNorm), else the token table."""
        base = self.base(net)
        found = getattr(base, "embeddings", None) or getattr(base, "embed_tokens", None)
        if found is None:
            raise FamilyLayoutError(f"{type(net).__name__} has no embeddings module (`embeddings` or "
                                    "`embed_tokens`) for Integrated Gradients and the gradient explainers to attach to.")
        return found

    def layers(self, net) -> list:
        base = self.base(net)
        found = getattr(getattr(base, "encoder", None), "layer", None)
        if found is None:
            found = getattr(base, "layers", None)
        if found is None:
            raise FamilyLayoutError(f"{type(net).__name__} has no encoder layer list (encoder.layer or layers).")
        return list(found)

    def attention_modules(self, net) -> list:
        """Each layer's attention core: forward returns (context, probabilities, ...)."""
        out = []
        for i, layer in enumerate(self.layers(net)):
            module = next((m for m in (getattr(getattr(layer, "attention", None), "self", None),
                                       getattr(layer, "attn", None), getattr(layer, "self_attn", None))
                           if m is not None), None)
            if module is None:
                raise FamilyLayoutError(f"layer {i} of {type(net).__name__} has no attention module "
                                        "(attention.self, attn or self_attn).")
            out.append(module)
        return out

    def head_parameters(self, net) -> list[HeadParameters]:
        """Per layer, the per-head parameter slices and W_O (see HeadParameters)."""
        heads = int(self.config.num_attention_heads)
        out = []
        for i, layer in enumerate(self.layers(net)):
            attn = getattr(layer, "attention", None)
            core = getattr(layer, "attn", None) or getattr(layer, "self_attn", None)
            if attn is not None and hasattr(attn, "self"):  # BERT layout: self.{query,key,value}, output.dense
                qkv, output = [getattr(attn.self, p, None) for p in ("query", "key", "value")], \
                    getattr(getattr(attn, "output", None), "dense", None)
                blocks = 1
            elif core is not None and hasattr(core, "Wqkv"):  # ModernBERT: one fused [Q | K | V] projection
                qkv, output, blocks = [core.Wqkv], getattr(core, "Wo", None), 3
            elif core is not None:  # Llama layout (EuroBERT, GTE, UltraBERT)
                qkv, output = [getattr(core, p, None) for p in ("q_proj", "k_proj", "v_proj")], \
                    getattr(core, "o_proj", None)
                blocks = 1
            else:
                qkv, output, blocks = [], None, 1
            if not qkv or not all(isinstance(p, torch.nn.Linear) for p in (*qkv, output)):
                raise FamilyLayoutError(f"layer {i}: no query/key/value and output projections to split by head "
                                        f"in {type(net).__name__}.")
            width = output.in_features
            if getattr(attn, "pruned_heads", None):
                raise FamilyLayoutError(f"layer {i} has pruned heads.")
            if width % heads or any(p.out_features != blocks * width for p in qkv):
                raise FamilyLayoutError(f"layer {i}'s projections do not split into {heads} equal heads (shared "
                                        "key/value heads have no per-head share).")
            slices = [(p.weight, 0, blocks) for p in qkv] + [(p.bias, 0, blocks) for p in qkv if p.bias is not None]
            out.append(HeadParameters(tuple(slices + [(output.weight, 1, 1)]), output))
        return out

    # ---- attention ----------------------------------------------------------------------------------------
    def attention_patterns(self, n: int) -> tuple[LayerPattern, ...]:
        """Each layer's pattern for a document of n tokens."""
        return (LayerPattern(FULL, 0, int(n)),) * int(self.config.num_hidden_layers)


class LongformerFamily(Family):
    name = "longformer"
    global_tokens = True
    attention_interface = False  # its own banded kernels; the band outputs are read as they are

    @property
    def windows(self) -> tuple[int, ...]:
        full = [int(w) for w in np.atleast_1d(self.config.attention_window)]
        return tuple(w // 2 for w in (full * int(self.config.num_hidden_layers) if len(full) == 1 else full))

    def check(self) -> None:
        """transformers pads every input to a multiple of the largest full window, and layer l then needs a length
        that is a multiple of its own full window; when a smaller window does not divide the largest, most
        document lengths fail inside the model, so such a checkpoint is refused here with the reason."""
        full = [int(w) for w in np.atleast_1d(self.config.attention_window)]
        layers = int(self.config.num_hidden_layers)
        if len(full) == 1:
            full = full * layers
        if len(full) != layers or any(w <= 0 or w % 2 for w in full):
            raise ModelLoadError(f"'{self.source}' has attention_window {full}: Longformer needs one positive even "
                                 f"window per layer ({layers} layers).")
        if any(max(full) % w for w in full):
            raise ModelLoadError(
                f"'{self.source}' has attention_window {full}: transformers pads inputs to a multiple of the largest "
                f"window ({max(full)}), which is not a multiple of every layer's window, so the model fails on most "
                "document lengths. Use windows that divide the largest one.")

    def padded_length(self, n: int) -> int:
        w2 = 2 * max(self.windows)  # transformers pads to a multiple of the largest full window
        return -(-int(n) // w2) * w2

    def attention_patterns(self, n: int) -> tuple[LayerPattern, ...]:
        # the key count is the band plus the one global column (<s>), as the memory formula has it
        return tuple(LayerPattern(BANDED_GLOBAL, w, 2 * w + 2) for w in self.windows)


class SlidingFamily(Family):
    """ModernBERT and UltraBERT: sliding-window layers and full layers (`layer_types`), RoPE positions."""

    name = "sliding-window"

    @property
    def radius(self) -> int:
        return int(self.config.sliding_window)  # ModernBERT: local_attention // 2; |i - j| <= radius

    def embeddings(self, net) -> torch.nn.Module:
        """The token table: RoPE puts positions into the attention, so its output holds no position."""
        base = self.base(net)
        table = getattr(getattr(base, "embeddings", None), "tok_embeddings", None) or getattr(base, "embed_tokens", None)
        if table is None:
            raise FamilyLayoutError(f"{type(net).__name__} has no token embeddings (embeddings.tok_embeddings or "
                                    "embed_tokens).")
        return table

    def attention_patterns(self, n: int) -> tuple[LayerPattern, ...]:
        # the eager implementation longviz loads scores every key of a sliding layer too, masking the far ones
        r, n = self.radius, int(n)
        return tuple(LayerPattern(BANDED, r, n) if t == "sliding_attention" else LayerPattern(FULL, 0, n)
                     for t in self.config.layer_types)


class BigBirdFamily(Family):
    """BigBird in the mode its config names. transformers switches a block-sparse model to full attention for
    good on the first input of at most (5 + 2 r) * block_size tokens (r random blocks), swapping every layer's
    attention module. `running` makes that switch before such a forward, so hooks see the modules that run, and
    puts the configured mode back afterwards: a short document runs with full attention, as transformers runs it,
    and the next long one block-sparse again."""

    name = "bigbird"
    attention_interface = False  # its own attention modules

    @property
    def block_sparse(self) -> bool:
        return self.config.attention_type == "block_sparse"

    @property
    def sparse_from(self) -> int:
        """Shortest input transformers runs block-sparse (longer than this many tokens)."""
        return (5 + 2 * int(self.config.num_random_blocks)) * int(self.config.block_size)

    def sparse_at(self, n: int) -> bool:
        return self.block_sparse and int(n) > self.sparse_from

    def padded_length(self, n: int) -> int:
        if not self.sparse_at(n):
            return int(n)
        b = int(self.config.block_size)
        return -(-int(n) // b) * b

    def attention_patterns(self, n: int) -> tuple[LayerPattern, ...]:
        if not self.sparse_at(n):
            return super().attention_patterns(n)
        keys = (5 + int(self.config.num_random_blocks)) * int(self.config.block_size)
        return (LayerPattern(BLOCK_SPARSE, 0, keys),) * int(self.config.num_hidden_layers)

    @contextmanager
    def running(self, net, n: int):
        base = self.base(net)
        _set_mode(base, "block_sparse" if self.sparse_at(n) else "original_full")
        try:
            yield
        finally:
            _set_mode(base, self.config.attention_type)


def _set_mode(base, mode: str) -> None:
    """BigBirdModel.set_attention_type: new attention modules that take over the existing query/key/value layers.
    Built on the meta device, their own throw-away layers cost no memory and draw nothing from torch's RNG.
    transformers installs the hooks that collect `output_attentions` once, on the modules of the model's first
    forward; the new modules get theirs here (without them the model returns no attentions, silently)."""
    if base.attention_type == mode:
        return
    with torch.device("meta"):
        base.set_attention_type(mode)
    if getattr(base, "_output_capturing_hooks_installed", False):
        from transformers.utils.output_capturing import install_output_capuring_hook

        for layer in base.encoder.layer:
            install_output_capuring_hook(layer.attention.self, "attentions", 1)


_FAMILIES = {"longformer": LongformerFamily, "modernbert": SlidingFamily, "ultrabert": SlidingFamily,
             "big_bird": BigBirdFamily}


def family_of(config, source: str = "") -> Family:
    """The family of a model by its config (full attention for any type not named in _FAMILIES)."""
    return _FAMILIES.get(config.model_type, Family)(config, source)
