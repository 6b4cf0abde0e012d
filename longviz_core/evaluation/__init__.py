"""Evaluation: what runs the model again or needs a labelled dataset — the one deletion engine (AOPC / LOdds and
first decision flips), the rankings it scores, and head importance."""
