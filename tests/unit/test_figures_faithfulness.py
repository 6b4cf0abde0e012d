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
