"""Loading models and datasets: the demo, a local directory, or a Hugging Face Hub id.

Every source goes through `from_pretrained` with `trust_remote_code=False`, so the demo exercises exactly the
code path a lab's own checkpoint takes. Failures become typed errors whose message says what to do.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from .._disk import METADATA_BYTES, read_file, texts_hasher
from ..config import DEMO, DEMO_MODELS
from ..errors import (
    DatasetError,
    HubUnreachableError,
    ModelLoadError,
    ModelNotFoundError,
    NoAttentionError,
    NotAClassifierError,
    SelectionError,
    whole_number,
)
from ..progress import Progress, report
from ..runtime import usable_device
from .checks import (
    check_complete, check_config, check_fits, check_shapes, check_vocabulary, config_error, distinct_labels, is_head,
    is_out_of_memory, tokenizer_fault, too_big, weight_fault,
)
from .encoding import Encoded, Template, encode, special_ids
from .capture import IMPLEMENTATION, use_longviz_attention
from .families import Family, family_of
from .heads import Head
from .files import check_no_nul, read_bounded, read_dataset_file
from .reproduce import check_reproduced
from .band_products import use_band_products
from .row_mask import ROW_MASK, use_row_mask

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


@dataclass(frozen=True)
class LoadedModel:
    model: torch.nn.Module = field(repr=False)
    tokenizer: object = field(repr=False)
    fingerprint: str
    source: str
    device: torch.device
    family: Family = field(repr=False)  # how this model is called, read and attributed (model.families)
    num_layers: int
    num_heads: int
    id2label: dict
    max_tokens: int  # longest input the position table allows
    position_offset: int  # first position id (padding_idx + 1 for RoBERTa-style models)
    attention_window: int  # one-sided Longformer window w, the largest over layers (0 for full attention)
    attention_windows: tuple[int, ...]  # (layers,) each layer's one-sided window w_l (() for full attention)
    head: Head  # what the classification head's outputs mean (model.heads)
    template: Template | None = None  # a decoder's input template; None: the notebook's <s> ... </s>

    @property
    def num_labels(self) -> int:
        return len(self.id2label)

    def label_name(self, i: int) -> str:
        """Class `i`'s name (a number outside id2label as itself); SelectionError unless `i` is a whole number."""
        i = whole_number(i, "class index", error=SelectionError)
        return str(self.id2label.get(i, i))

    def encode(self, text: str, max_tokens: int) -> Encoded:
        """`text` as this model's input (encoding.encode with its position table, offset and template)."""
        return encode(self.tokenizer, text, max_tokens, model_max=self.max_tokens,
                      position_offset=self.position_offset, template=self.template)

    def __call__(self, **inputs):
        """One forward of the shared model on `inputs` (see Family.inputs), in its family's running context."""
        with self.family.running(self.model, inputs["input_ids"].shape[-1]):
            return self.model(**inputs)


def load_model(source: str, device=None, progress: Progress | None = None) -> LoadedModel:
    """Load a sequence classifier from "demo" (Longformer), "demo-modernbert", a local directory or a Hub id, in
    eval mode."""
    from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

    if not isinstance(source, str) or not source.strip():
        raise ModelNotFoundError("No model given: choose 'demo', a local checkpoint directory or a Hub id.")
    source = source.strip()
    if source in DEMO_MODELS:
        from ..demo import ensure_demo

        path = str(ensure_demo(progress=progress, name=source).model_dir)
    else:
        path = _resolve_path(source)
    device = usable_device(device)
    report(progress, 0.9, "Loading the model")
    local = Path(path).is_dir()
    try:
        config = AutoConfig.from_pretrained(path, trust_remote_code=False)
    except (OSError, ValueError, KeyError) as exc:
        raise _translate_load_error(source, exc, local=local) from exc
    except Exception as exc:  # huggingface_hub's validation of the config's fields (a size written as "32")
        raise config_error(source, " ".join(str(exc).split())) from exc
    # what config.json says is checked before a model is built from it, so its faults are named as such
    try:
        check_config(config, source)
        _check_no_custom_code(config, source)
        _check_classifier(config, source)
        family = family_of(config, source)
        family.check()  # before the model asserts on its config
        check_fits(config, source, device)
    except ModelLoadError:
        raise
    except (TypeError, ValueError) as exc:  # a field of another type than its family reads (a window of "8")
        raise config_error(source, _first_line(exc)) from exc
    try:
        _check_tokenizer_files(path, config, source)
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=False)
    except ModelLoadError:
        raise
    except Exception as exc:  # a tokenizer file that is not JSON, or that the tokenizers library cannot parse
        fault = tokenizer_fault(Path(path)) if local else None
        if fault is None and isinstance(exc, (OSError, ValueError, KeyError)):
            raise _translate_load_error(source, exc, local=local) from exc
        detail = fault or f"{type(exc).__name__}: {_first_line(exc)}"
        raise ModelLoadError(f"The tokenizer of '{source}' cannot be read: {detail}. Save the tokenizer the model was "
                             "trained with into the checkpoint folder (tokenizer.save_pretrained(<dir>)).") from exc
    try:
        model, info = AutoModelForSequenceClassification.from_pretrained(
            path, trust_remote_code=False, attn_implementation="eager", output_loading_info=True,
            # bf16 / fp16 checkpoints compute in float32 on a CPU (no fast half-precision matmul there)
            dtype=torch.float32 if device.type == "cpu" else "auto",
            ignore_mismatched_sizes=True,  # reported below by name, not as a damaged file
        )
    except Exception as exc:
        raise _weights_error(source, path, exc, config, device, local) from exc
    if len(tokenizer) <= len(set(tokenizer.all_special_ids)):
        raise ModelLoadError(
            f"The tokenizer of '{source}' has no vocabulary beyond its {len(tokenizer)} special tokens, so every "
            "word would become an unknown token. Save the tokenizer the model was trained with next to it "
            "(tokenizer.save_pretrained(<dir>))."
        )
    check_shapes(info, config, source)
    check_vocabulary(tokenizer, model, source)
    missing_head = sorted(k for k in info.get("missing_keys", []) if is_head(k))
    if missing_head:
        raise NotAClassifierError(
            f"'{source}' has no trained classification head (missing {missing_head[0]}); "
            "longviz explains fine-tuned sequence classifiers."
        )
    check_complete(info, config, source)
    try:
        model.to(device).eval()
    except Exception as exc:
        if is_out_of_memory(exc):
            raise too_big(source, config, device, "the GPU", failed=exc) from exc
        raise
    windows = family.windows
    loaded = LoadedModel(
        model=model,
        tokenizer=tokenizer,
        fingerprint=_fingerprint(source, config, model),
        source=source,
        device=device,
        family=family,
        num_layers=int(config.num_hidden_layers),
        num_heads=int(config.num_attention_heads),
        id2label=distinct_labels(config.id2label or {}),
        max_tokens=family.max_tokens,
        position_offset=family.position_offset,
        attention_window=max(windows, default=0),
        attention_windows=windows,
        head=Head.of_config(config),
        template=family.template(tokenizer, model),
    )
    _check_attention_output(loaded)
    check_reproduced(loaded)
    if family.forward_implementation == IMPLEMENTATION:
        use_longviz_attention(model)
    elif family.forward_implementation == ROW_MASK:  # Longformer: its mask as one row, its window products in blocks
        use_row_mask(model)
        use_band_products(model)
    report(progress, 1.0, "Model ready")
    return loaded


_TOKENIZER_JSON = "tokenizer.json"


def _check_tokenizer_files(path: str, config, source: str) -> None:
    """A local checkpoint must carry its tokenizer: tokenizer.json (a fast tokenizer) or every vocabulary
    file of its tokenizer class (e.g. vocab.json and merges.txt for RoBERTa/Longformer, vocab.txt for BERT).
    Without them transformers quietly builds a tokenizer of special tokens only and every word becomes
    unknown. A Hub id is left to transformers, which downloads what the repository has."""
    from transformers.models.auto.tokenization_auto import TOKENIZER_MAPPING_NAMES, tokenizer_class_from_name

    folder = Path(path)
    if not folder.is_dir():
        return
    present = {p.name for p in folder.iterdir() if p.is_file() and p.stat().st_size > 0}
    if _TOKENIZER_JSON in present:
        return
    name = None
    try:
        name = json.loads(read_file(folder / "tokenizer_config.json", f"The tokenizer_config.json of '{source}'",
                                    METADATA_BYTES, ModelLoadError)).get("tokenizer_class")
    except (FileNotFoundError, ValueError, AttributeError):  # no or no usable class named: the model type's
        pass
    name = name or TOKENIZER_MAPPING_NAMES.get(config.model_type)
    cls = tokenizer_class_from_name(name.removesuffix("Fast")) if name else None
    needed = sorted(f for key, f in (getattr(cls, "vocab_files_names", None) or {}).items() if key != "tokenizer_file")
    missing = [f for f in needed if f not in present]
    if missing or not needed:
        lacks = f"; of {', '.join(needed)} it lacks {', '.join(missing)}" if needed else ""
        raise ModelLoadError(
            f"'{source}' has no complete tokenizer: no {_TOKENIZER_JSON}{lacks}. Save the tokenizer the model "
            "was trained with into the checkpoint folder (tokenizer.save_pretrained(<dir>))."
        )


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _resolve_path(source: str) -> str:
    p = Path(source).expanduser()
    if p.exists():
        if not (p / "config.json").exists():
            raise ModelNotFoundError(f"'{source}' exists but has no config.json: it is not a saved checkpoint.")
        _check_regular_files(p, source)
        return str(p)
    looks_like_path = source.startswith((".", "/", "~")) or os.sep in source.strip("/").split("/", 1)[-1] or (
        not _HUB_ID.match(source)
    )
    if looks_like_path:
        raise ModelNotFoundError(f"No model directory at '{source}'. Check the path (it must contain config.json).")
    return source  # a Hub id


# the files a tokenizer reads whole: tokenizer.json, BPE merges, a WordPiece vocabulary, a sentencepiece model
_VOCABULARY_FILE = re.compile(r"(tokenizer\.json|merges\.txt|vocab\.txt|.+\.model)$")
VOCABULARY_BYTES = 256 * 2**20  # each of them: the largest public ones are about 35 MB (Gemma's tokenizer.json)


def _check_regular_files(folder: Path, source: str) -> None:
    """Every file of a local checkpoint is a regular file; each JSON file transformers parses whole (config,
    tokenizer config, special tokens) is within the bound of every metadata file, and each vocabulary file
    within VOCABULARY_BYTES: a file linked to /dev/zero, a pipe or a runaway file is refused by name before
    transformers or tokenizers reads it without end or into memory whole."""
    fix = "copy the checkpoint's own files in its place (save_pretrained)"
    for entry in sorted(folder.iterdir()):
        if entry.name.endswith(".json") and entry.name != _TOKENIZER_JSON and not entry.is_dir():
            read_file(entry, f"The {entry.name} of '{source}'", METADATA_BYTES, ModelLoadError, fix=fix)
        elif entry.exists() and not (entry.is_file() or entry.is_dir()):
            raise ModelLoadError(f"The {entry.name} of '{source}' is not a regular file (a device, socket or pipe); "
                                 f"{fix}.")
        elif entry.is_file() and _VOCABULARY_FILE.match(entry.name) and entry.stat().st_size > VOCABULARY_BYTES:
            raise ModelLoadError(f"The {entry.name} of '{source}' is larger than {VOCABULARY_BYTES >> 20} MiB, more "
                                 f"than any tokenizer holds; {fix}.")


def _check_no_custom_code(config, source: str) -> None:
    """A checkpoint that ships its own modelling code (`auto_map`) is refused: longviz loads with
    trust_remote_code=False, so transformers would build its own class of the same model_type instead of the
    checkpoint's code, and the attention shown would be another model's."""
    if getattr(config, "auto_map", None):
        raise ModelLoadError(
            f"'{source}' ships its own modelling code (auto_map: {', '.join(sorted(config.auto_map))}). longviz "
            "never runs a checkpoint's code, and the built-in class of the same model type may compute other "
            "attention, so this checkpoint is refused.")


def _check_classifier(config, source: str) -> None:
    archs = list(getattr(config, "architectures", None) or [])
    if archs and not any(a.endswith("ForSequenceClassification") for a in archs):
        raise NotAClassifierError(
            f"'{source}' is a {', '.join(archs)} checkpoint, not a sequence classifier. "
            "Fine-tune it for classification (…ForSequenceClassification) first."
        )


def _translate_load_error(source: str, exc: Exception, local: bool) -> ModelLoadError:
    text = str(exc)
    offline = os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0")
    if "model_type" in text and "Unrecognized model" in text:
        return config_error(source, 'it has no model_type (the architecture, such as "longformer" or "bert")')
    unknown = re.search(r"model type `([^`]*)` but Transformers does not recognize", text)
    if unknown:
        import transformers

        return ModelLoadError(f"The config of '{source}' names model_type '{unknown.group(1)}', which transformers "
                              f"{transformers.__version__} does not know. If it is a newer architecture, upgrade "
                              "transformers (pip install -U transformers); otherwise fix model_type in config.json.")
    if "Unrecognized" in text or "does not appear to have" in text and "classification" in text:
        return NotAClassifierError(f"'{source}' cannot be loaded as a sequence classifier: {text.splitlines()[0]}")
    if local:  # a checkpoint folder on disk: no Hub involved, whatever the error's wording
        return ModelLoadError(f"Could not load the checkpoint in '{source}': {_first_line(exc)}. Check its files "
                              "(config.json, the weights and the tokenizer files), or save it again.")
    if offline or any(s in text for s in ("connect", "Connection", "resolve", "offline", "Max retries", "timed out")):
        return HubUnreachableError(
            f"Could not reach the Hugging Face Hub for '{source}'. On an offline machine download the "
            "checkpoint elsewhere and pass its local directory, or set HF_HUB_OFFLINE=1 to use a copy already "
            f"in the Hugging Face cache. ({text.splitlines()[0] if text else type(exc).__name__})"
        )
    if any(s in text for s in ("not a valid model identifier", "Repository Not Found", "404", "is not a local folder")):
        return ModelNotFoundError(f"No model '{source}' on the Hub or on disk. Check the id or give a local path.")
    return ModelLoadError(f"Could not load '{source}': {text.splitlines()[0] if text else type(exc).__name__}")


def _weights_error(source: str, path: str, exc: Exception, config, device, local: bool) -> ModelLoadError:
    """A failure to build the model or read its weights, named: memory, a weight file at fault (weight_fault),
    else the library's own words."""
    if is_out_of_memory(exc):
        return too_big(source, config, device, failed=exc)
    fault = weight_fault(Path(path), exc) if local else None
    if fault:
        return ModelLoadError(f"The weights of '{source}' cannot be loaded: {fault}")
    if isinstance(exc, (OSError, ValueError, KeyError)):
        return _translate_load_error(source, exc, local=local)
    return ModelLoadError(f"The model '{source}' cannot be built from its files ({type(exc).__name__}: "
                          f"{_first_line(exc)}). Check that config.json describes the weights, or copy or "
                          "download the checkpoint again.")


def _fingerprint(source: str, config, model: torch.nn.Module) -> str:
    """Source + revision + config + weights: a cache key that changes whenever the model's numbers can."""
    h = hashlib.blake2b(digest_size=12)
    h.update(source.encode())
    h.update(str(getattr(config, "_commit_hash", "") or "").encode())
    # where the files sit and which library wrote them do not change the numbers
    settings = {k: v for k, v in config.to_dict().items() if k not in ("_name_or_path", "transformers_version")}
    h.update(json.dumps(settings, sort_keys=True, default=str).encode())
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(memoryview(tensor.detach().to("cpu").contiguous().view(-1).view(torch.uint8).numpy()))
    return h.hexdigest()


def _check_attention_output(loaded: LoadedModel) -> None:
    """A probe of three tokens (<s> </s> </s>) must return attention weights. It runs in the family's running
    context, so it leaves the model as it found it (BigBird would otherwise stay in full attention for good)."""
    tok = loaded.tokenizer
    cls_id, sep_id, _ = special_ids(tok)
    ids = np.asarray([cls_id, sep_id, sep_id], dtype=np.int64)
    off = loaded.position_offset
    probe = Encoded(input_ids=ids, baseline_ids=ids, position_ids=np.arange(off, off + 3, dtype=np.int64),
                    global_mask=np.asarray([1, 0, 0], dtype=np.int64), tokens=["", "", ""],
                    n_text_tokens_original=1, max_tokens=3)
    try:
        with torch.no_grad():
            out = loaded(**loaded.family.inputs(probe, loaded.device), output_attentions=True)
    except Exception as exc:  # a model that cannot even run a tiny input is unusable here
        if is_out_of_memory(exc):
            raise too_big(loaded.source, loaded.model.config, loaded.device,
                          "the GPU" if loaded.device.type == "cuda" else "this machine", failed=exc) from exc
        raise NoAttentionError(f"'{loaded.source}' failed on a probe input: {exc}") from exc
    if not getattr(out, "attentions", None):
        raise NoAttentionError(
            f"'{loaded.source}' returns no attention weights; longviz needs output_attentions=True support."
        )


# ---------------------------------------------------------------------------------------------- datasets
_TEXT_COLUMNS = ("text", "document", "content", "body", "article", "abstract", "sentence", "review")
_LABEL_COLUMNS = ("label", "labels", "class", "target", "y", "category")


def load_dataset(
    source,
    text_column: str | None = None,
    label_column: str | None = None,
    id2label: dict | None = None,
    filename: str | None = None,
    split: str = "test",
) -> pd.DataFrame:
    """A DataFrame with columns `text` (str) and, when the data has labels, `label` (int); others are kept.

    `source`: "demo", a CSV/TSV/Parquet/JSONL path, uploaded bytes (with `filename` for the format), or a
    `datasets` Hub name. String labels are mapped through the model's `id2label`."""
    if isinstance(source, str) and source == DEMO:
        from ..demo import ensure_demo

        df = pd.read_parquet(ensure_demo().dataset_path)
        df = df[df["split"] == "test"].reset_index(drop=True) if "split" in df else df
    elif isinstance(source, (bytes, bytearray, io.IOBase)):
        data = read_bounded(source, "The upload") if isinstance(source, io.IOBase) else bytes(source)
        df = _read_bytes(data, filename)
    elif isinstance(source, (str, Path)) and Path(source).expanduser().exists():
        p = Path(source).expanduser()
        df = _read_bytes(read_dataset_file(p), p.name)
    elif isinstance(source, str) and _HUB_ID.match(source):
        df = _read_hub(source, split)
    else:
        raise DatasetError(f"No dataset at '{source}': give a CSV, Parquet or JSONL path, or 'demo'.")
    return normalise_dataset(df, text_column, label_column, id2label)


def _read_bytes(data: bytes, filename: str | None) -> pd.DataFrame:
    if not data or not data.strip():
        raise DatasetError("The file is empty.")
    name = (filename or "").lower()
    try:
        if name.endswith(".parquet") or data[:4] == b"PAR1":
            return pd.read_parquet(io.BytesIO(data))
        if b"\x00" in data[:4096]:
            raise DatasetError("The file looks binary, not text: upload CSV, JSONL or Parquet.")
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise DatasetError(
                f"The file is not UTF-8 text (undecodable byte at offset {exc.start}); re-save it as UTF-8."
            ) from exc
        if name.endswith((".jsonl", ".json", ".ndjson")) or text.lstrip().startswith(("{", "[")):
            return pd.read_json(io.StringIO(text), lines=not text.lstrip().startswith("["))
        sep = "\t" if name.endswith(".tsv") else ","
        # only an empty cell is missing: pandas' other missing-value words ("NA", "None", "null", "nan", …) are
        # text a document or a label may be
        return pd.read_csv(io.StringIO(text), sep=sep, keep_default_na=False, na_values=[""])
    except DatasetError:
        raise
    except Exception as exc:  # parser errors of pandas/pyarrow come in many types
        raise DatasetError(f"Could not parse the file ({type(exc).__name__}: {str(exc).splitlines()[0]}).") from exc


def _read_hub(name: str, split: str) -> pd.DataFrame:
    try:
        import datasets  # optional: only needed for Hub datasets
    except ImportError as exc:
        raise DatasetError(f"'{name}' is not a local file; loading Hub datasets needs `pip install datasets`.") from exc
    try:
        ds = datasets.load_dataset(name, split=split)
    except Exception as exc:
        raise DatasetError(
            f"Could not load the Hub dataset '{name}' ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__}). "
            "Offline? Set HF_HUB_OFFLINE=1 to use a cached copy, or export it to CSV/Parquet and give the path."
        ) from exc
    return ds.to_pandas()


def normalise_dataset(df: pd.DataFrame, text_column=None, label_column=None, id2label=None) -> pd.DataFrame:
    if df is None or len(df) == 0:
        raise DatasetError("The dataset has no rows.")
    df = df.copy()
    df.columns = [str(c) for c in df.columns]
    repeated = sorted({c for c in df.columns if list(df.columns).count(c) > 1})
    if repeated:
        raise DatasetError(f"Column name(s) {repeated} appear more than once: give every column its own name.")
    tcol = text_column or _detect_text_column(df)
    if tcol not in df.columns:
        raise DatasetError(f"No text column '{tcol}'. Columns are: {', '.join(df.columns)}.")
    lcol = label_column or next((c for c in _LABEL_COLUMNS if c in df.columns), None)
    if label_column and label_column not in df.columns:
        raise DatasetError(f"No label column '{label_column}'. Columns are: {', '.join(df.columns)}.")
    texts = df[tcol]
    keep = texts.map(lambda t: isinstance(t, str) and bool(t.strip()))
    check_no_nul(texts[keep], tcol)
    out = df[keep].reset_index(drop=True)
    out.attrs["dropped_rows"] = int((~keep).sum())
    if len(out) == 0:
        raise DatasetError(f"Column '{tcol}' has no non-empty text.")
    if tcol != "text":
        out = out.drop(columns=[c for c in ("text",) if c in out.columns]).rename(columns={tcol: "text"})
    if lcol is not None:
        labels = _normalise_labels(out[lcol], id2label)
        if lcol != "label":
            out = out.drop(columns=[c for c in ("label",) if c in out.columns]).rename(columns={lcol: "label"})
        out["label"] = labels
    return out


def _detect_text_column(df: pd.DataFrame) -> str:
    lower = {c.lower(): c for c in df.columns}
    for name in _TEXT_COLUMNS:
        if name in lower:
            return lower[name]
    strings = [c for c in df.columns if df[c].map(lambda v: isinstance(v, str)).mean() > 0.9]
    if not strings:
        raise DatasetError(f"No text column found (columns: {', '.join(df.columns)}); name one explicitly.")
    return max(strings, key=lambda c: df[c].map(len).mean())


def _normalise_labels(col: pd.Series, id2label: dict | None) -> pd.Series:
    num_classes = len(id2label) if id2label else None
    if col.isna().any():
        raise DatasetError(f"{int(col.isna().sum())} rows have no label; fill them or drop the label column.")
    if pd.api.types.is_numeric_dtype(col):
        if not np.all(np.equal(np.mod(col.to_numpy(dtype=float), 1), 0)):
            raise DatasetError("Labels are numbers but not integers.")
        labels = col.astype(np.int64)
    else:
        as_str = col.astype(str).str.strip()
        if as_str.str.fullmatch(r"-?\d+").all():
            labels = as_str.astype(np.int64)
        else:
            if not id2label:
                raise DatasetError("Labels are strings and the model has no id2label to map them.")
            by_name = {str(v).strip().lower(): int(k) for k, v in id2label.items()}
            if len(by_name) < len(id2label):
                raise DatasetError(f"The model's classes {sorted(map(str, id2label.values()))} repeat a name, so a "
                                   "label written as a name cannot say which class it is; label the rows with class "
                                   "numbers, or give the classes distinct names in config.json (id2label).")
            unknown = sorted(set(as_str.str.lower()) - set(by_name))
            if unknown:
                raise DatasetError(
                    f"Labels {unknown[:5]} are not among the model's classes {sorted(by_name)}."
                )
            labels = as_str.str.lower().map(by_name).astype(np.int64)
    if num_classes is not None:
        bad = sorted(set(labels[(labels < 0) | (labels >= num_classes)].tolist()))
        if bad:
            raise DatasetError(f"Labels {bad[:5]} are outside the model's classes 0..{num_classes - 1}.")
    return labels


def dataset_fingerprint(df: pd.DataFrame) -> str:
    """The texts (in order) and labels: what a store's manifest and the dataset-level caches are keyed by."""
    h = texts_hasher(df["text"])
    if "label" in df:
        h.update(np.asarray(df["label"], dtype=np.int64).tobytes())
    return h.hexdigest()
