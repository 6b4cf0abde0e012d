"""The --ray path on a local Ray instance on CPU: two shards as Ray tasks on the demo give the store an
in-process single-shard run gives (the explainer leaderboard's kind included, with no special case)."""
from __future__ import annotations

import pytest
import torch

from longviz_core.dataset.kinds import Settings
from longviz_core.dataset.ray import run_on_ray
from longviz_core.dataset.run import precompute
from longviz_core.dataset.store import ResultStore
from support.oracles import assert_stores_equal

ray = pytest.importorskip("ray")  # the [ray] extra
pytestmark = [pytest.mark.ray, pytest.mark.slow]

# the leaderboard kind kept cheap: two explainers, two random seeds, the flip scan over the first 5 %
SETTINGS = Settings(max_tokens=256, n_steps=2, explainers=("grad_x_input", "random"), seeds=(0, 1), max_removed=0.05)
WHAT, LIMIT = "attention,attribution,leaderboard", 3


def test_ray_shards_equal_a_single_run(demo, demo_model, demo_dataset, tmp_path, monkeypatch):
    # Ray runs its workers at nice 15 (its `worker_niceness`): beside the suite's other processes they starved, and
    # this test waited 100-277 s in whole-suite runs against 62 s; here they run at the suite's own priority
    monkeypatch.setenv("RAY_worker_niceness", "0")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        summaries = run_on_ray("demo", "demo", tmp_path / "ray", WHAT, SETTINGS, workers=2, limit=LIMIT)
    finally:
        ray.shutdown()
    assert sorted(s.shard for s in summaries) == [(0, 2), (1, 2)]
    assert sorted(s.computed["attention"] for s in summaries) == [1, 2]
    assert sorted(s.computed["leaderboard"] for s in summaries) == [1, 2]
    assert {p.name for p in (tmp_path / "ray" / "index").glob("*.sqlite")} >= {"shard-0-of-2.sqlite",
                                                                              "shard-1-of-2.sqlite"}
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # as each Ray task with one CPU runs
    try:
        precompute(demo_model, demo_dataset, tmp_path / "single", WHAT, SETTINGS, limit=LIMIT)
    finally:
        torch.set_num_threads(before)
    assert_stores_equal(tmp_path / "ray", tmp_path / "single")
    store = ResultStore(tmp_path / "ray")
    assert store.documents()["row"].tolist() == [0, 1, 2] and store.manifest["model"]["source"] == "demo"
