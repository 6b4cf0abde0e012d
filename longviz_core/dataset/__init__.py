"""Dataset-wide results: the kinds of per-document units (kinds), the resumable, shardable precompute (run), its
Ray driver (ray), the on-disk store (store), and every function that turns per-document results into dataset
numbers (aggregate); the explainer leaderboard over one document or many (leaderboard)."""
