"""Checks of a checkpoint beyond what transformers checks: sizes in config.json that can build a model (before it
is built), weights that fit in memory and fit config.json, a tokenizer whose ids all have an embedding row, class
names that name one class each."""
from __future__ import annotations

import json
import os
import pickle
import re
import zipfile
from pathlib import Path

import torch
from safetensors import safe_open

from ..errors import DatasetError, ModelLoadError, whole_number
from .files import read_bounded

# config.json's sizes that must be whole numbers >= 1 where a config has them (read through the config, so another
# family's spelling, GPT-2's n_layer, is read too): a model built from 0 or -1 of them fails far from the cause
# ("returns no attention weights", "negative dimension", "integer modulo by zero") or not at all
CONFIG_SIZES = ("num_hidden_layers", "num_attention_heads", "num_key_value_heads", "hidden_size", "head_dim",
                "intermediate_size", "vocab_size", "max_position_embeddings")


def config_error(source: str, fault: str) -> ModelLoadError:
    """The one message of a config.json that cannot describe a model: the fault, and where to fix it."""
    return ModelLoadError(f"The config of '{source}' is invalid: {fault.rstrip('.')}. Fix config.json (it must "
                          "describe the saved weights), or save the checkpoint again with save_pretrained.")


def check_config(config, source: str) -> None:
    """config.json's sizes (CONFIG_SIZES) whole numbers >= 1, the hidden size split evenly over the heads and the
    query heads over the key/value heads; else ModelLoadError naming the field, before a model is built."""
    sizes = {}
    for name in CONFIG_SIZES:
        value = getattr(config, name, None)
        if value is None:
            continue
        try:
            sizes[name] = whole_number(value, name, lo=1, error=ModelLoadError)
        except ModelLoadError as exc:
            raise config_error(source, str(exc)) from None
    heads, kv = sizes.get("num_attention_heads"), sizes.get("num_key_value_heads")
    if "head_dim" not in sizes and heads and sizes.get("hidden_size", 0) % heads:
        raise config_error(source, f"hidden_size {sizes['hidden_size']} is not a multiple of num_attention_heads "
                                   f"{heads}")
    if heads and kv and heads % kv:
        raise config_error(source, f"num_attention_heads {heads} is not a multiple of num_key_value_heads {kv}")


def value_bytes(config, device: torch.device) -> int:
    """Bytes of one weight as loaded: float32 on a CPU (load_model's choice), else the checkpoint's own dtype."""
    dtype = getattr(config, "dtype", None) if device.type != "cpu" else torch.float32
    return dtype.itemsize if isinstance(dtype, torch.dtype) else 4


def weight_bytes(config, device: torch.device) -> int:
    """A lower bound on the bytes of the weights config.json describes (checked by check_config): each layer's
    query, key, value and output projections and its two feed-forward matrices, and the token table; biases,
    norms, the position table and a third (gated) feed-forward matrix come on top. 0 for a config without the
    sizes (a composite model's): nothing to refuse it on."""
    if getattr(config, "hidden_size", None) is None or getattr(config, "num_hidden_layers", None) is None:
        return 0
    h = int(config.hidden_size)
    heads = int(getattr(config, "num_attention_heads", None) or 1)
    head_dim = int(getattr(config, "head_dim", None) or h // heads)
    kv = int(getattr(config, "num_key_value_heads", None) or heads)
    ffn = int(getattr(config, "intermediate_size", None) or 4 * h)
    per_layer = 2 * h * heads * head_dim + 2 * h * kv * head_dim + 2 * h * ffn
    values = int(config.num_hidden_layers) * per_layer + int(getattr(config, "vocab_size", None) or 0) * h
    return values * value_bytes(config, device)


def memory_bytes(device: torch.device) -> int:
    """All the memory of `device` (a GPU's, else this machine's), free or not."""
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def too_big(source: str, config, device: torch.device, where: str = "this machine",
            failed: BaseException | None = None) -> ModelLoadError:
    """The one message of a model that does not fit in memory: what its config needs (as loaded for `device`),
    what `where` (this machine, or the GPU) has in all, and the allocation that `failed` when it did."""
    need = weight_bytes(config, device)
    have = memory_bytes(device if where == "the GPU" else torch.device("cpu"))
    sizes = (f"its config.json describes weights of at least {need / 2**30:,.1f} GiB "
             f"({value_bytes(config, device) * 8}-bit) and {where} has {have / 2**30:,.1f} GiB in all")
    if failed is None:
        return ModelLoadError(f"The model '{source}' does not fit in memory: {sizes}. Load it on a machine with more "
                              "memory, or check the sizes in config.json (hidden_size, num_hidden_layers, "
                              "intermediate_size, vocab_size).")
    return ModelLoadError(f"The model '{source}' does not fit in the memory free now: loading it ran out of memory "
                          f"({type(failed).__name__}: {str(failed).strip()[:200] or 'no details'}); {sizes}. Free "
                          "memory (other programs, other models loaded), or load it on a machine with more memory.")


def check_fits(config, source: str, device: torch.device) -> None:
    """Weights larger than all the memory there is can never load: refused from the config before anything is
    allocated (an allocation the kernel grants lazily could otherwise end in the out-of-memory killer).
    transformers reads the weights into this machine's memory first, then they move to a GPU."""
    need = weight_bytes(config, device)
    if need > memory_bytes(torch.device("cpu")):
        raise too_big(source, config, device)
    if device.type == "cuda" and need > memory_bytes(device):
        raise too_big(source, config, device, "the GPU")


def is_out_of_memory(exc: BaseException) -> bool:
    """An allocation that failed: MemoryError, torch's OutOfMemoryError, or the CPU allocator's RuntimeError."""
    text = str(exc)
    return isinstance(exc, (MemoryError, torch.OutOfMemoryError)) or isinstance(exc, RuntimeError) and any(
        s in text for s in ("DefaultCPUAllocator", "not enough memory", "can't allocate memory", "out of memory"))


def is_head(name: str) -> bool:
    """A weight of the classification head (BERT-style `classifier`, a decoder's `score`)."""
    return "classifier" in name or name.startswith("score")


def check_shapes(info: dict, config, source: str) -> None:
    """Weights whose shapes differ from what config.json describes: named, with the likely cause (a head trained
    for another number of classes than id2label / num_labels lists, when the head's output is all that differs),
    instead of "the weight file is damaged"."""
    mismatched = sorted(info.get("mismatched_keys") or [])
    if not mismatched:
        return
    # the head's output layer alone differs: its rows are the classes (model shape (num_labels, ...))
    outputs = [m for m in mismatched if is_head(m[0]) and tuple(m[2])[:1] == (config.num_labels,)]
    classes = bool(outputs) and all(is_head(m[0]) for m in mismatched)
    name, stored, expected = outputs[0] if classes else next((m for m in mismatched if not is_head(m[0])),
                                                             mismatched[0])
    cause = (f"its classification head was trained for {tuple(stored)[0]} classes but config.json lists "
             f"{config.num_labels} (id2label / num_labels); make config.json name the head's classes"
             if classes else
             "config.json describes another size of model than the file holds (hidden_size, intermediate_size, "
             "vocab_size, max_position_embeddings?); fix config.json or save the checkpoint again")
    raise ModelLoadError(f"The weights of '{source}' do not fit its config.json: {name} is {tuple(stored)} in the "
                         f"file, {tuple(expected)} in the model ({len(mismatched)} weight(s) differ); {cause}.")


_LAYER = re.compile(r"\.(?:layer|layers|h|block|blocks)\.(\d+)\.")


def check_complete(info: dict, config, source: str) -> None:
    """Weights config.json describes that the file lacks (transformers would start them at random: a model
    computing nonsense, silently), or encoder layers the file holds that config.json leaves out (a model
    shorter than the one trained); named, with the layer count they point to."""
    missing = sorted(info.get("missing_keys") or [])
    extra_layers = sorted({int(m.group(1)) for k in info.get("unexpected_keys") or [] if (m := _LAYER.search(k))})
    if not missing and not extra_layers:
        return
    layers = getattr(config, "num_hidden_layers", None)
    if missing:
        absent = sorted({int(m.group(1)) for k in missing if (m := _LAYER.search(k))})
        where = (f": config.json says num_hidden_layers = {layers}, but the file has no weights for layer(s) "
                 f"{', '.join(map(str, absent))} (0-based)" if all(_LAYER.search(k) for k in missing) else "")
        raise ModelLoadError(f"The weights of '{source}' lack {len(missing)} weight(s) its config.json describes "
                             f"(first: {missing[0]}){where}; they would be random. Fix config.json to describe "
                             "the saved model, or save the checkpoint again.")
    raise ModelLoadError(f"The weights of '{source}' hold layer(s) {', '.join(map(str, extra_layers))} (0-based) "
                         f"that its config.json leaves out (num_hidden_layers = {layers}): the model would run "
                         "without them. Fix num_hidden_layers in config.json.")


def check_vocabulary(tokenizer, model, source: str) -> None:
    """Every id the tokenizer can produce must have a row in the embedding table: a larger tokenizer would
    fail (IndexError) at the first document using such a token, far from its cause."""
    rows = model.get_input_embeddings().num_embeddings
    largest = max(max(tokenizer.get_vocab().values(), default=0), *(tokenizer.all_special_ids or [0]))
    if largest >= rows:
        raise ModelLoadError(f"The tokenizer of '{source}' produces token ids up to {largest}, but the model's "
                             f"embedding table has {rows} rows (ids 0..{rows - 1}): the tokenizer is not the one the "
                             "model was trained with. Save the matching tokenizer next to the model.")


def distinct_labels(id2label: dict) -> dict[int, str]:
    """id2label with every class name distinct: names that repeat (compared as the dataset loader compares
    them, stripped and case-folded) get their class index appended, "pos (1)", so a label, a link's class
    name and a chart's legend never stand for two classes."""
    names = {int(k): str(v) for k, v in id2label.items()}
    folded = [v.strip().lower() for v in names.values()]
    return {k: f"{v} ({k})" if folded.count(v.strip().lower()) > 1 else v for k, v in names.items()}


def weight_fault(folder: Path, exc: BaseException) -> str | None:
    """What is wrong with the weight files in a checkpoint `folder` whose loading failed with `exc`, in words with
    the fix: a safetensors file whose header cannot be read (named), a .bin that is no PyTorch file or is cut off,
    a pickle holding more than tensors (refused for safety); None when no file is at fault."""
    tensors = sorted(folder.glob("model*.safetensors"))  # model.safetensors, or its shards
    for f in tensors:  # transformers prefers these; opening one reads its header only
        try:
            with safe_open(str(f), "pt"):
                pass
        except Exception as bad:  # safetensors' SafetensorError, or an OSError reading the file
            return f"{f.name} is damaged: {_header_fault(bad)}. Copy or download the checkpoint again."
    if tensors:
        return None
    for f in sorted(folder.glob("pytorch_model*.bin")):
        with open(f, "rb") as fh:
            head = fh.read(4)
        if head[:2] != b"PK" and head[:1] != b"\x80":
            return (f"{f.name} is not a PyTorch weight file (neither the zip archive torch.save writes nor a "
                    "pickle): it is damaged or another kind of file. Copy or download the checkpoint again.")
        if head[:2] == b"PK" and not zipfile.is_zipfile(f) or "truncated" in str(exc):
            return (f"{f.name} is cut off (an interrupted copy or download): its end is missing. Copy or download "
                    "the checkpoint again.")
        if "PytorchStreamReader" in str(exc):  # torch's reader of the zip archive
            return (f"{f.name} is damaged: torch cannot read its archive ({_line(str(exc))}). Copy or download "
                    "the checkpoint again.")
    if isinstance(exc, pickle.UnpicklingError):
        return ("its .bin weights are a pickle holding more than tensors, and pickle weights are not loaded for "
                "safety (torch.load(weights_only=True) refused them). Convert the checkpoint to safetensors in a "
                "trusted environment: model.save_pretrained(<dir>, safe_serialization=True).")
    return None


TOKENIZER_JSON = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json")


def tokenizer_fault(folder: Path) -> str | None:
    """The first of a checkpoint folder's JSON tokenizer files (TOKENIZER_JSON) that is not JSON, named with the
    parser's words; None when each present parses."""
    for name in TOKENIZER_JSON:
        path = folder / name
        if not path.is_file():
            continue
        try:
            with path.open("rb") as fh:
                json.loads(read_bounded(fh, name))
        except DatasetError as exc:  # larger than the bounded reader takes
            return str(exc)
        except (OSError, ValueError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            return f"{name} is not valid JSON ({_line(str(exc))})"
    return None


def _header_fault(exc: BaseException) -> str:
    """A safetensors error in words: what is wrong with the file's header (it starts with its length, then JSON)."""
    text = str(exc)
    if "incomplete metadata" in text or "not fully covered" in text:
        return "it is shorter than its header says, cut off by an interrupted copy or download"
    if "too small" in text:
        return "it is empty or ends before its header"
    if "invalid header length" in text:
        return "it ends inside its header, cut off by an interrupted copy or download"
    if any(s in text for s in ("too large", "invalid JSON", "UTF-8", "utf-8", "header start", "offset")):
        return f"its header is overwritten, not the JSON a safetensors file starts with ({_line(text)})"
    return _line(text)


def _line(text: str) -> str:
    text = text.strip()
    return text.splitlines()[0].removeprefix("Error while deserializing header: ") if text else "unreadable"
