"""Typed errors of the core. The UI catches `LongvizError` and shows its message; nothing else should leak."""
import math

import numpy as np


class LongvizError(Exception):
    """Base class: every error the core raises on purpose, with a message meant for the user."""


class ModelLoadError(LongvizError):
    """A model or tokenizer could not be loaded."""


class ModelNotFoundError(ModelLoadError):
    """No checkpoint at that path or hub id."""


class HubUnreachableError(ModelLoadError):
    """The Hugging Face Hub could not be reached (offline machine, firewall)."""


class NotAClassifierError(ModelLoadError):
    """The checkpoint is not a sequence-classification model."""


class NoAttentionError(ModelLoadError):
    """The model cannot return attention weights (e.g. an SDPA/flash-only architecture)."""


class DatasetError(LongvizError, ValueError):
    """A dataset could not be read or normalised (missing column, empty file, bad encoding, bad labels)."""


class InputTextError(LongvizError, ValueError):
    """A document text that cannot be analysed (empty, whitespace only, not text)."""


class SettingsError(LongvizError, ValueError):
    """An option or argument outside what the function accepts (an unknown mode, a count out of range, a value
    of the wrong kind); the message names what is accepted."""


class SelectionError(SettingsError):
    """A layer, head, token position or grid cell that the model or document does not have."""


class AttributionError(LongvizError, ValueError):
    """Integrated Gradients cannot run as asked: its settings, the class to explain, or an analysis or
    attribution that belongs to another model or document."""


class ExplainerError(LongvizError, ValueError):
    """An explainer that cannot run on these inputs (unknown method or option, wrong model, wrong target)."""


class MissingDependencyError(LongvizError, ImportError):
    """A package installed separately from longviz is missing; the message gives the command that installs it."""


class CacheCorruptError(LongvizError):
    """A cache or store file exists but cannot be read back."""


class StoreError(LongvizError):
    """The on-disk result store cannot serve the request."""


class ManifestMismatchError(StoreError):
    """Results computed with another model, dataset or settings would be mixed."""


def finite_vector(values, what: str, error: type[LongvizError]) -> np.ndarray:
    """`values` as a 1-D float64 array of finite numbers (one per token), else `error` naming `what`."""
    try:
        v = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise error(f"{what} must be a 1-D array of numbers: {exc}") from None
    if v.ndim != 1:
        raise error(f"{what} must be 1-D (one value per token), got shape {v.shape}")
    if not np.all(np.isfinite(v)):
        bad = np.flatnonzero(~np.isfinite(v))
        raise error(f"{what} has {bad.size} NaN/inf values (first at position {bad[0]})")
    return v


def whole_number(value, what: str, lo: int | None = None, hi: int | None = None,
                 error: type[LongvizError] = SettingsError) -> int:
    """`value` as an int when it is a whole number (an int, or a float such as 512.0) within [lo, hi], else
    `error` naming `what` and the accepted range: the front door's one check of counts, positions and limits
    (NaN, infinity, 2.5, True and "7" are refused, not rounded or read)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise error(f"{what} must be a whole number, got {value!r} ({type(value).__name__}).")
    if isinstance(value, (float, np.floating)) and (not np.isfinite(value) or value != int(value)):
        raise error(f"{what} must be a whole number, got {value!r}.")
    v = int(value)
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        accepted = (f"{lo}..{hi}" if hi is not None else f"at least {lo}") if lo is not None else f"at most {hi}"
        raise error(f"{what} must be {accepted}, got {v if abs(v) < 10**18 else 'a number that large'}.")
    return v


def real_number(value, what: str, lo: float | None = None, hi: float | None = None, *, above: bool = False,
                below: bool = False, error: type[LongvizError] = SettingsError) -> float:
    """`value` as a float when it is a finite number (an int or a float) in the range lo..hi, each end included
    unless `above` (value > lo) or `below` (value < hi), else `error` naming `what` and the accepted range: the
    front door's one check of fractions, probabilities and thresholds (NaN, infinity, True and "0.5" are refused,
    not read)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise error(f"{what} must be a number, got {value!r} ({type(value).__name__}).")
    try:
        v = float(value)
    except OverflowError:  # an int beyond float's range
        v = math.inf
    if not math.isfinite(v):
        raise error(f"{what} must be a finite number, got {value!r}.")
    if (lo is not None and (v < lo or above and v == lo)) or (hi is not None and (v > hi or below and v == hi)):
        if lo is not None and hi is not None:
            accepted = f"in {'(' if above else '['}{lo:g}, {hi:g}{')' if below else ']'}"
        else:
            accepted = f"{'>' if above else '>='} {lo:g}" if lo is not None else f"{'<' if below else '<='} {hi:g}"
        raise error(f"{what} must be {accepted}, got {v:g}.")
    return v


def items(values, what: str, error: type[LongvizError] = SettingsError) -> tuple:
    """`values` as a tuple when it is a list, tuple or 1-D array of items, else `error` naming `what` (a lone
    number or a string where a list is expected is refused, not split into characters or read as one item)."""
    if isinstance(values, (str, bytes, dict, set)) or not hasattr(values, "__iter__"):
        raise error(f"{what} must be a list, got {values!r} ({type(values).__name__}).")
    return tuple(values.tolist() if isinstance(values, np.ndarray) else values)
