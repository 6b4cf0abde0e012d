"""The offline demos' front door: the corpus (demo/corpus.py), their training (demo/train.py, with ModernBERT's
recipe in demo/modernbert.py and the Qwen3 decoder's in demo/decoder.py) and the built demos in the cache
(demo/shipped.py)."""

from .corpus import generate_corpus
from .decoder import DECODER
from .modernbert import MODERNBERT
from .shipped import (
    DEMOS,
    SHIPPED,
    SHIPPED_DECODER,
    SHIPPED_MODERNBERT,
    ensure_demo,
    file_checksums,
    restore_shipped,
)
from .train import DEMO_VERSION, LONGFORMER, DemoPaths, Recipe, build_demo

__all__ = ["DECODER", "DEMOS", "DEMO_VERSION", "LONGFORMER", "MODERNBERT", "SHIPPED", "SHIPPED_DECODER",
           "SHIPPED_MODERNBERT", "DemoPaths", "Recipe", "build_demo", "ensure_demo", "file_checksums",
           "generate_corpus", "restore_shipped"]
