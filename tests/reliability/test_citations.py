"""Sources are cited by their authors (Song et al. 2024, Serrano & Smith 2019, …), as docs/methods.md does: never by
an internal seed number ("seed" and three digits), which no reader can look up (issue 29)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SEED_CITATION = re.compile(r"\bseeds?\s+0\d\d\b", re.IGNORECASE)


@pytest.mark.guards("misleading")
def test_no_source_is_cited_by_a_seed_number():
    tops = ("longviz_core", "pages", "docs", "benchmarks", "tests")
    files = [ROOT / "app.py", ROOT / "README.md",
             *(p for top in tops for p in (ROOT / top).rglob("*") if p.suffix in {".py", ".md", ".toml"})]
    hits = [f"{p.relative_to(ROOT)}:{n}" for p in files for n, line in enumerate(p.read_text().splitlines(), 1)
            if SEED_CITATION.search(line) and p != Path(__file__).resolve()]
    assert len(files) > 50 and not hits, hits
    assert SEED_CITATION.search("random rankings (seeds 003 and 004)")  # what it looks for
