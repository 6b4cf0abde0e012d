"""The offline demo's front door: the corpus (demo/corpus.py), its training (demo/train.py) and the built demo in
the cache (demo/shipped.py)."""

from .corpus import generate_corpus
from .shipped import SHIPPED, ensure_demo, file_checksums, restore_shipped
from .train import DEMO_VERSION, DemoPaths, build_demo

__all__ = ["DEMO_VERSION", "SHIPPED", "DemoPaths", "build_demo", "ensure_demo", "file_checksums", "generate_corpus",
           "restore_shipped"]
