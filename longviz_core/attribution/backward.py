"""One backward pass of the shared model for the gradient explainers: hidden states and their gradients, and
each chosen layer's attention gradient handed over in the analysis's banded layout; hooks removed in `finally`."""
from __future__ import annotations

import math
from functools import partial
from typing import Sequence

import numpy as np
import torch

from ..errors import ExplainerError
from ..model.analysis import DocumentAnalysis
from ..model.bands import AttentionBands
from ..model.block_sparse import BlockSparseLayer
from ..model.capture import implementation
from ..model.loading import LoadedModel


def _producer(t: torch.Tensor):
    """The autograd node whose output `t` was before transformers' in-place zeroing (IndexPut) or view."""
    node = t.grad_fn
    while node is not None and type(node).__name__.startswith(("IndexPut", "View")):
        node = node.next_functions[0][0]
    if node is None:
        raise ExplainerError("the attention probabilities are not in the autograd graph; gradient explainers "
                             "need a model whose parameters or inputs require gradients")
    return node


class AttentionGrads:
    """Hooks that hand each chosen layer's d objective / d attention to `consume(layer, grads)` during the
    backward pass, as a one-layer AttentionBands in the analysis's layout (zeros where the analysis has none)."""

    def __init__(self, model: LoadedModel, analysis: DocumentAnalysis, layers: Sequence[int], consume):
        self.model, self.bands, self.consume = model, analysis.attention, consume
        self.layers = set(int(l) for l in layers)
        self.handles: list = []
        self.parts: dict[int, dict] = {}
        self.done: set[int] = set()

    def attach(self) -> None:
        # Longformer returns probabilities only when every layer is asked to: each layer's forward hook drops
        # them from the output, the chosen layers' after hooking their gradient
        family = self.model.family
        for l, module in enumerate(family.attention_modules(self.model.model)):
            if l in self.layers or family.global_tokens:
                self.handles.append(module.register_forward_hook(partial(self._forward, l)))

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles.clear()

    def _forward(self, layer, module, args, out):
        if len(out) < 2 or not torch.is_tensor(out[1]):
            raise ExplainerError(f"{type(module).__name__} returned no attention probabilities")
        if isinstance(_layer_of(self.bands, layer), BlockSparseLayer):
            # BigBird block-sparse: the returned weights are not the ones applied (model/block_sparse.py); its
            # output is A V, so d objective / d A = (d objective / d output) V^T, from the output's gradient
            with torch.no_grad():
                value = module.value(args[0]).detach()  # (1, N, heads * d)
            self.handles.append(out[0].register_hook(partial(self._applied, layer, value, module.num_attention_heads)))
            return None
        if not self.model.family.global_tokens:  # the returned weights are the tensor multiplied with the values
            self.handles.append(out[1].register_hook(partial(self._dense, layer)))
            return None
        local = out[1]  # (1, n_padded, H, g + 2 w_l + 1)
        glob = out[2] if len(out) > 2 else None  # (1, H, g, n_padded), a view of the softmax output
        if layer in self.layers:
            self.parts[layer] = {"want": 1 + (glob is not None)}
            self.handles.append(_producer(local).register_prehook(partial(self._part, layer, "local", local.shape)))
            if glob is not None:
                self.handles.append(_producer(glob).register_prehook(
                    partial(self._part, layer, "global", glob.shape)))
        empty = lambda t: t.new_zeros((t.shape[0], t.shape[1], 0, 0)).detach()  # noqa: E731
        return (out[0], empty(local), *((empty(glob),) if glob is not None else ()))

    def _part(self, layer, name, shape, grad_outputs):
        grad = grad_outputs[0]
        if grad is None or grad.numel() != math.prod(shape):
            raise ExplainerError("could not capture the attention gradients of this model (transformers' "
                                 "Longformer attention changed?)")
        part = self.parts[layer]
        part[name] = grad.detach().reshape(shape)
        if len(part) - 1 == part["want"]:
            self._longformer_layer(layer, part)
            del self.parts[layer]

    def _longformer_layer(self, layer, part):
        b, n, w, g = self.bands, self.bands.n, self.bands.window, len(self.bands.global_idx)
        local = part["local"][0, :n].transpose(0, 1).float().cpu().numpy()  # (H, n, g + 2 w_l + 1)
        w_l = (local.shape[-1] - g - 1) // 2
        band = np.zeros((b.num_heads, n, 2 * w + 1), dtype=np.float32)  # (H, n, 2w+1)
        band[:, :, w - w_l : w + w_l + 1] = local[..., g:]
        # Entries the attention never has (keys outside the document or in the window padding, global keys
        # inside the band: transformers masks them before the softmax) get no gradient, as in the bands.
        keys = np.arange(n)[:, None] - w + np.arange(2 * w + 1)[None, :]  # (n, 2w+1)
        band[:, (keys < 0) | (keys >= n) | np.isin(keys, b.global_idx)] = 0.0
        gcols = np.ascontiguousarray(local[..., :g])  # (H, n, g)
        if g:
            grows = part["global"][0, :, :, :n].float().cpu().numpy()  # (H, g, n)
        else:
            grows = np.zeros((b.num_heads, 0, n), dtype=np.float32)
        self._hand_over(layer, band, gcols, grows)

    def _applied(self, layer, value, heads, grad):
        per_head = lambda t: t[0].view(t.shape[1], heads, -1).transpose(0, 1)  # noqa: E731  (heads, N, d)
        self._dense(layer, torch.matmul(per_head(grad.detach()), per_head(value).transpose(-1, -2))[None])

    def _dense(self, layer, grad):
        n = self.bands.n
        dense = grad.detach()[0, :, :n, :n].float().cpu().numpy()  # (H, n, n)
        band = np.zeros((dense.shape[0], n, 2 * n - 1), dtype=np.float32)  # (H, n, 2n-1): AttentionBands.from_full
        rows = np.arange(n)[:, None]
        band[:, rows, n - 1 - rows + np.arange(n)[None, :]] = dense
        empty_c, empty_r = np.zeros((dense.shape[0], n, 0), np.float32), np.zeros((dense.shape[0], 0, n), np.float32)
        self._hand_over(layer, band, empty_c, empty_r)

    def _hand_over(self, layer, band, gcols, grows):
        grads = AttentionBands(band[None], gcols[None], grows[None], self.bands.global_idx, self.bands.window,
                               (self.bands.windows[layer],))
        self.done.add(layer)
        self.consume(layer, grads)

    def check(self) -> None:
        missing = sorted(self.layers - self.done)
        if missing:
            raise ExplainerError(f"no attention gradient reached layer(s) {missing}: this model's attention is not "
                                 "supported by the gradient explainers")


def _layer_of(attention, layer: int):
    """Layer `layer` of an analysis held layer by layer (LayeredAttention), else None."""
    layers = getattr(attention, "layers", ())
    return layers[layer] if layer < len(layers) else None


def backward(model: LoadedModel, analysis: DocumentAnalysis, target: int, objective: str, *,
              hidden: Sequence[int] = (), attention: Sequence[int] = (), consume=None) -> dict:
    """One forward with gradients and one backward of `objective` ('logit' or 'prob' of `target`; 'prob' is the
    head's explained quantity, model.heads: p_t, sigmoid_t, or a regression's score, which is also its logit).

    hidden: layers l whose input h^l (h^0 = the embeddings output) is returned with its gradient, as
    {l: (h^l, d objective / d h^l)}, each (n, d) float32 on the model's device, window padding cut off.
    attention: layers whose attention gradient goes to `consume(layer, grads)` during the backward. The embeddings
    output is detached into a leaf, so no gradient reaches the parameters and their .grad stays untouched.
    Caller holds COMPUTE."""
    net, n, family = model.model, analysis.n, model.family
    if net.training:
        raise ExplainerError("the shared model must stay in eval mode")
    wanted = sorted(set(int(l) for l in hidden))
    # the backward runs down to the earliest layer input needed: every chosen layer's attention lies above it
    floor = min([*wanted, *(int(l) for l in attention)], default=0)
    order = sorted(set(wanted) | {floor})
    captured: dict[int, torch.Tensor] = {}
    handles = []

    def leaf(_module, _args, out):
        return out.detach().requires_grad_()

    def keep(l, _module, args, kwargs):
        captured[l] = args[0] if args else kwargs["hidden_states"]

    grads_hook = AttentionGrads(model, analysis, attention, consume) if attention else None
    inputs = family.inputs(analysis.encoded, model.device)
    # hooks go on inside the running context: BigBird may swap its attention modules for this length
    with family.running(net, n):
        try:
            layers = family.layers(net)
            handles.append(family.embeddings(net).register_forward_hook(leaf))
            for l in order:
                handles.append(layers[l].register_forward_pre_hook(partial(keep, l), with_kwargs=True))
            if grads_hook is not None:
                grads_hook.attach()
            # attention gradients are read from the weights eager returns (a decoder runs longviz's chunked
            # attention otherwise, which returns none); such explainers make a layer whole anyway (layered.py)
            weights = "eager" if attention else net.config._attn_implementation
            with torch.enable_grad(), implementation(net, weights):
                out = net(**inputs, output_attentions=bool(attention and family.global_tokens))
                logits = out.logits[0].float()  # (classes,)
                value = logits[target] if objective == "logit" else model.head.explained(logits, target)
                got = torch.autograd.grad(value, [captured[l] for l in order])
            if grads_hook is not None:
                grads_hook.check()
        finally:
            for h in handles:
                h.remove()
            if grads_hook is not None:
                grads_hook.remove()
    return {l: (captured[l].detach()[0, :n], g[0, :n]) for l, g in zip(order, got) if l in wanted}


def token_dot(h: torch.Tensor, g: torch.Tensor) -> np.ndarray:
    """Σ_d h_{i,d} g_{i,d} per token, (n,) float64."""
    return (h.double() * g.double()).sum(dim=-1).cpu().numpy()
