"""The faithfulness figures: deletion curves (one document and many), first-flip dots with their no-flip labels,
the dataset summary's 'mean ± std' text."""
from __future__ import annotations

import math

import altair as alt
import pandas as pd
import pytest

from longviz_core.figures import faithfulness as fig


def test_curve_and_flip_charts():
    single = pd.DataFrame({"ranking": ["|IG|", "|IG|", "Random", "Random"], "k": [0.1, 0.2, 0.1, 0.2],
                           "aopc": [0.3, 0.5, 0.1, 0.2], "lodds": [-1, -2, -0.1, -0.3],
                           "probability": [0.6, 0.4, 0.8, 0.7]})
    assert isinstance(fig.deletion_curves_chart(single, "aopc"), alt.Chart)
    several = pd.concat([single.assign(doc=0), single.assign(doc=1)])
    assert isinstance(fig.deletion_curves_chart(several, "lodds"), alt.LayerChart)  # mean line + std band
    with pytest.raises(ValueError, match="metric"):
        fig.deletion_curves_chart(single, "auc")
    flips = pd.DataFrame({"ranking": ["|IG|", "Random", "Random"], "flip_fraction": [0.1, math.nan, 0.6]})
    spec = fig.flip_chart(flips).to_dict()
    rows = {v["row"] for d in spec["datasets"].values() for v in d}
    assert rows == {"|IG|", "Random (1 no flip)"}


def test_faithfulness_summary_display():
    summary = pd.DataFrame({"ranking": ["|IG|"], "documents": [3], "aopc mean": [0.25], "aopc std": [0.05],
                            "flip_fraction mean": [math.nan], "flip_fraction std": [math.nan],
                            "flipped": [0], "no flip": [3]})
    out = fig.faithfulness_summary(summary, ("aopc", "flip_fraction"))
    assert out.iloc[0].tolist() == ["|IG|", 3, "0.250 ± 0.050", "—", 0, 3]


def test_a_regression_heads_curves_are_drawn_as_a_score():
    """A regression's "probability" column holds its score: the axis takes the score's own range (not [0, 1]) and
    names it; LOdds is no metric of a score."""
    from longviz_core.figures.faithfulness import deletion_curves_chart

    curves = pd.DataFrame({"ranking": ["|IG|"] * 3, "k": [0.1, 0.5, 1.0], "probability": [3.5, 1.2, -2.0],
                           "aopc": [0.0, 2.3, 5.5]})
    spec = deletion_curves_chart(curves, "probability", score=True).to_dict()
    y = spec["encoding"]["y"]
    assert y["title"].startswith("score") and "domain" not in y.get("scale", {})
    assert spec["title"]["subtitle"].startswith("s(x without the top k%)")
    assert deletion_curves_chart(curves, "probability").to_dict()["encoding"]["y"]["scale"]["domain"] == [0, 1]
    with pytest.raises(ValueError, match="metric must be one of"):
        deletion_curves_chart(curves.assign(lodds=0.0), "lodds", score=True)
