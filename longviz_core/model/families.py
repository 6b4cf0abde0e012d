"""Model families: the one place that knows how a family of encoders is called, read and attributed.

A `Family` answers, for a loaded sequence classifier: its forward inputs from an `Encoded` (Longformer's global
attention mask or not) and the length the model really runs at, the embeddings layer Integrated Gradients
attaches to, the encoder layers and their attention modules, each head's share of the attention parameters
(head importance), what the classification head reads (the <s>/[CLS] row, the mean of all rows or a decoder's last
token), the longest input and each layer's attention pattern (banded with radius w, banded + global columns, full,
block-sparse, causal).

Families (config.model_type):
  longformer                 banded + global <s>, radius attention_window[l] // 2; word + position embeddings
  modernbert, ultrabert      sliding layers banded with radius config.sliding_window (ModernBERT:
                             local_attention // 2), `layer_types` marks the full layers; RoPE, so IG attaches to
                             the token embeddings table; classifier_pooling "cls" or "mean"
  big_bird                   block-sparse (global, sliding and random blocks; full attention below
                             (5 + 2 r) * block_size tokens, as transformers runs it) or original_full, as the
                             config names; word + position embeddings
  decoders                   transformers' GenericForSequenceClassification models (Llama, Mistral, Qwen2/3,
                             Gemma2/3, Phi3, SmolLM3, Olmo2, ...): causal layers, full or sliding (query i over keys
                             i - W + 1 .. i), grouped-query attention; the head reads the last token; the tokenizer's
                             own single-sequence template; RoPE, so IG attaches to the token table
  anything else              full attention (BERT, RoBERTa, EuroBERT, GTE, ...): the `embeddings` module where
                             there is one (BERT/RoBERTa: word + position + type), else the token table (RoPE)
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch

from ..errors import LongvizError, ModelLoadError

BANDED_GLOBAL, BANDED, FULL, BLOCK_SPARSE, CAUSAL = "banded+global", "banded", "full", "block-sparse", "causal"
# Architectures whose position ids start after padding_idx (RoBERTa family); others start at 0.
_ROBERTA_STYLE = {"longformer", "roberta", "xlm-roberta", "camembert", "xlm-roberta-xl", "data2vec-text"}


class FamilyLayoutError(LongvizError, ValueError):
    """The loaded model does not have the module layout its family should have (a custom or changed class)."""


@dataclass(frozen=True)
class LayerPattern:
    """Which keys a layer's queries attend to."""

    kind: str  # BANDED_GLOBAL | BANDED | FULL | BLOCK_SPARSE | CAUSAL
    radius: int  # one-sided window w of the banded kinds (|i - j| <= w), CAUSAL's reach back (i - w <= j <= i,
    #              0: all earlier keys); 0 otherwise
    keys: int  # keys one query scores: what its attention costs in memory

    def describe(self, layer: int) -> str:
        """One sentence for a figure's caption about layer `layer` (0-based; shown 1-based)."""
        if self.kind in (BANDED_GLOBAL, BANDED):
            text = f"The diagonal band is layer {layer + 1}'s sliding window (±{self.radius} tokens)"
            return text + ("; the first row and column are the global <s> token." if self.kind == BANDED_GLOBAL
                           else ".")
        if self.kind == CAUSAL:
            reach = (f"the {self.radius} tokens before it and itself (a sliding window)" if self.radius
                     else "itself and every token before it")
            return f"Layer {layer + 1} is causal: each token attends to {reach}; above the diagonal is empty."
        if self.kind == BLOCK_SPARSE:
            return (f"Layer {layer + 1} attends in blocks: the first and last blocks globally, the others to a sliding "
                    "window of three blocks, the two global blocks and random blocks (in eval mode transformers "
                    "draws none: each is the first block, counted again).")
        return f"Layer {layer + 1} attends over the whole document (no sliding window)."


@dataclass(frozen=True)
class HeadParameters:
    """One layer's attention parameters split by head (T3-Vis's S(l, h)) and the projection whose input holds the
    heads' outputs side by side (where Michel et al.'s gates go)."""

    # ((parameter, axis, blocks, group), ...): axis = blocks x slices x head_dim; query head h reads slice
    # h // group (group > 1: grouped-query attention's key/value heads, each shared by `group` query heads)
    slices: tuple
    output: torch.nn.Linear  # W_O: input (..., heads * head_dim), head h = its h-th slice


class Family:
    """A full-attention encoder (BERT, RoBERTa, EuroBERT, GTE, ...); the other families override what differs."""

    name = "full-attention"
    global_tokens = False  # the forward takes a global_attention_mask (Longformer)
    # attention goes through transformers' AttentionInterface, so model/capture.py sees each layer's Q and K
    attention_interface = True
    # the implementation of every forward but the analysis's: eager, longviz's chunked attention (capture.py) or,
    # for Longformer, eager with its padding mask built as the one row it reads (row_mask.py) and its window
    # products computed block by block (band_products.py)
    forward_implementation = "eager"

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

    def read_row(self, n: int) -> int | None:
        """The one row the head reads in a document of n tokens (<s>/[CLS]: 0), None under mean pooling."""
        return None if self.pooling == "mean" else 0

    def readout(self, n: int) -> np.ndarray:
        """(n,) weights of the rows the head reads: e_row for one read row, 1/n everywhere for "mean"."""
        row = self.read_row(n)
        if row is None:
            return np.full(n, 1.0 / n)
        v = np.zeros(n)
        v[row] = 1.0
        return v

    def template(self, tokenizer, net):
        """A decoder's input template (encoding.Template); None: the notebook's <s> ... </s> pair."""
        return None

    def reads(self) -> str:
        """What the head reads, in words for the pages."""
        return ("the mean of every token's final state" if self.pooling == "mean"
                else "the first token's final state (<s> / [CLS])")

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
            kv = self.key_value_heads()
            groups = [1] + [heads // kv] * (len(qkv) - 1) if len(qkv) == 3 else [1] * len(qkv)
            if width % heads or heads % kv or any(p.out_features != blocks * width // g
                                                  for p, g in zip(qkv, groups)):
                raise FamilyLayoutError(f"layer {i}'s projections do not split into {heads} equal heads "
                                        f"(query heads; {kv} key/value heads).")
            slices = [(p.weight, 0, blocks, g) for p, g in zip(qkv, groups)]
            slices += [(p.bias, 0, blocks, g) for p, g in zip(qkv, groups) if p.bias is not None]
            out.append(HeadParameters(tuple(slices + [(output.weight, 1, 1, 1)]), output))
        return out

    # ---- attention ----------------------------------------------------------------------------------------
    def attention_patterns(self, n: int) -> tuple[LayerPattern, ...]:
        """Each layer's pattern for a document of n tokens."""
        return (LayerPattern(FULL, 0, int(n)),) * int(self.config.num_hidden_layers)

    def key_value_heads(self) -> int:
        """Key/value heads per layer (grouped-query attention: fewer than the query heads)."""
        return int(getattr(self.config, "num_key_value_heads", None) or self.config.num_attention_heads)


class LongformerFamily(Family):
    name = "longformer"
    global_tokens = True
    attention_interface = False  # its own banded kernels; the band outputs are read as they are
    forward_implementation = "longviz-row-mask"  # every forward, the analysis's too: its kernels ignore the name

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
    # eager scores every key of every layer, the sliding ones too: a forward+backward at 8,192 tokens keeps
    # (12, n, n) per layer, 205 GiB at ModernBERT-base dimensions; longviz's chunked sdpa keeps no scores
    forward_implementation = "longviz"

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
        # every forward runs longviz's chunked sdpa (forward_implementation): a sliding layer's query scores the
        # keys its window reaches
        r, n = self.radius, int(n)
        return tuple(LayerPattern(BANDED, r, min(n, 2 * r + 1)) if t == "sliding_attention"
                     else LayerPattern(FULL, 0, n)
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


class DecoderFamily(Family):
    """A decoder LM fine-tuned as a sequence classifier (transformers' GenericForSequenceClassification): causal
    layers, full or sliding, grouped-query attention, the head on the last token, no <s> ... </s> pair.

    transformers' head reads the rightmost token that is not `pad_token_id`: without a pad token it refuses
    batches, and with pad = eos it reads an earlier token whenever the input ends in eos (or a deletion test
    puts a pad there). longviz never pads a batch (copies share one length), so `running` makes the head read
    the last position of every row, as it does for a single unpadded input: the pad id is set to -1, which no
    input holds, for the forward's duration."""

    name = "decoder"
    pooling = "last"
    # eager would hold (heads, n, n) per layer: 68 GB at 32,768 tokens for Qwen3-0.6B
    forward_implementation = "longviz"

    @property
    def max_tokens(self) -> int:
        return int(getattr(self.config, "max_position_embeddings", 2048))

    @property
    def position_offset(self) -> int:
        return 0

    def read_row(self, n: int) -> int:
        return int(n) - 1

    def reads(self) -> str:
        return "the last token's final state (a decoder)"

    def kwargs(self, input_ids, attention_mask, position_ids, global_mask=None) -> dict:
        # no key/value cache: a classifier's one forward does not need it, and at 32,768 tokens it would hold
        # every layer's keys and values (GiBs for a 0.6B model)
        return {"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids,
                "use_cache": False}

    def template(self, tokenizer, net):
        """The tokenizer's own single-sequence template (Llama, Gemma: a BOS before; Qwen: nothing), found by
        encoding one word with and without its special tokens; the baseline's filler is the first of pad, unk
        and eos whose embedding is not zero. A pad row is often zero (`padding_idx`), and under RMSNorm a token
        scaled from zero jumps at once to its full normalised direction, so a path from it misses that jump and
        Integrated Gradients could not add up to F(x) - F(baseline)."""
        from .encoding import Template

        probe = "hello"
        bare = tokenizer(probe, add_special_tokens=False)["input_ids"]
        full = tokenizer(probe, add_special_tokens=True)["input_ids"]
        at = next((i for i in range(len(full) - len(bare) + 1) if full[i : i + len(bare)] == bare), None)
        if not bare or at is None:
            raise FamilyLayoutError(f"'{self.source}': its tokenizer's template does not keep the text's tokens "
                                    "together, so longviz cannot tell its special tokens from the text.")
        table = self.embeddings(net).weight
        filler = next((t for t in (tokenizer.pad_token_id, tokenizer.unk_token_id, tokenizer.eos_token_id)
                       if t is not None and t < table.shape[0] and bool(table[t].any())), None)
        if filler is None:
            raise FamilyLayoutError(f"'{self.source}': its tokenizer has no pad, unk or eos token with a non-zero "
                                    "embedding for the Integrated Gradients baseline.")
        return Template(tuple(full[:at]), tuple(full[at + len(bare):]), int(filler))

    def embeddings(self, net) -> torch.nn.Module:
        """The token table: RoPE puts positions into the attention."""
        table = getattr(self.base(net), "embed_tokens", None)
        if table is None:
            raise FamilyLayoutError(f"{type(net).__name__} has no token embeddings (embed_tokens).")
        return table

    def layer_types(self) -> list[str]:
        layers = int(self.config.num_hidden_layers)
        types = getattr(self.config, "layer_types", None)
        if types is None:  # Mistral-style: one sliding_window for every layer, or none
            window = getattr(self.config, "sliding_window", None)
            types = ["sliding_attention" if window else "full_attention"] * layers
        return list(types)

    def check(self) -> None:
        """Layers longviz cannot reproduce (linear attention, state-space, chunked, ...) are refused by name."""
        types = self.layer_types()
        odd = sorted(set(types) - {"full_attention", "sliding_attention"})
        if odd or len(types) != int(self.config.num_hidden_layers):
            raise ModelLoadError(f"'{self.source}' ({self.config.model_type}) has layers of type {odd or types}: "
                                 "longviz reproduces causal full and sliding-window attention only, so it cannot "
                                 "show this model's attention.")
        if getattr(self.config, "is_causal", True) is False or getattr(self.config, "use_bidirectional_attention",
                                                                       False):
            raise ModelLoadError(f"'{self.source}' runs its decoder bidirectionally; longviz reproduces causal "
                                 "decoders only.")

    def attention_patterns(self, n: int) -> tuple[LayerPattern, ...]:
        window = int(getattr(self.config, "sliding_window", None) or 0)
        out = []
        for t in self.layer_types():
            reach = window - 1 if t == "sliding_attention" and 0 < window - 1 < n - 1 else 0  # j > i - window
            out.append(LayerPattern(CAUSAL, reach, min(int(n), reach + 1) if reach else int(n)))
        return tuple(out)

    @contextmanager
    def running(self, net, n: int):
        config = net.config.get_text_config()
        before = config.pad_token_id
        config.pad_token_id = -1
        try:
            yield
        finally:
            config.pad_token_id = before


_FAMILIES = {"longformer": LongformerFamily, "modernbert": SlidingFamily, "ultrabert": SlidingFamily,
             "big_bird": BigBirdFamily}


def _is_decoder_classifier(config) -> bool:
    """True when transformers builds this config's sequence classifier as a GenericForSequenceClassification
    (a decoder LM with a score head on the last token): read from the config's model type through transformers'
    own auto mapping, so every decoder of that layout is found, not a list of names."""
    import transformers
    from transformers.modeling_layers import GenericForSequenceClassification
    from transformers.models.auto.modeling_auto import MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES

    name = MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES.get(config.model_type)
    cls = getattr(transformers, name, None) if isinstance(name, str) else None
    return isinstance(cls, type) and issubclass(cls, GenericForSequenceClassification)


def family_of(config, source: str = "") -> Family:
    """The family of a model by its config (full attention for an encoder type not named in _FAMILIES)."""
    if config.model_type in _FAMILIES:
        return _FAMILIES[config.model_type](config, source)
    return (DecoderFamily if _is_decoder_classifier(config) else Family)(config, source)
