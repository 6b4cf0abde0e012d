"""Typed errors of the core. The UI catches `LongvizError` and shows its message; nothing else should leak."""


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


class CacheCorruptError(LongvizError):
    """A cache or store file exists but cannot be read back."""


class StoreError(LongvizError):
    """The on-disk result store cannot serve the request."""


class ManifestMismatchError(StoreError):
    """Results computed with another model, dataset or settings would be mixed."""
