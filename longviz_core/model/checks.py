"""Checks of a loaded checkpoint beyond what transformers checks: weights that fit config.json, a tokenizer whose
ids all have an embedding row, class names that name one class each."""
from __future__ import annotations

from ..errors import ModelLoadError


def check_shapes(info: dict, config, source: str) -> None:
    """Weights whose shapes differ from what config.json describes: named, with the likely cause (a head trained
    for another number of classes than id2label / num_labels lists), instead of "the weight file is damaged"."""
    mismatched = sorted(info.get("mismatched_keys") or [])
    if not mismatched:
        return
    name, stored, expected = mismatched[0]
    head = "classifier" in name or name.startswith("score")
    cause = (f"its classification head was trained for {tuple(stored)[0]} classes but config.json lists "
             f"{config.num_labels} (id2label / num_labels); make config.json name the head's classes"
             if head else "config.json does not describe these weights (another size of model?)")
    raise ModelLoadError(f"The weights of '{source}' do not fit its config.json: {name} is {tuple(stored)} in the "
                         f"file, {tuple(expected)} in the model ({len(mismatched)} weight(s) differ); {cause}.")


def check_vocabulary(tokenizer, model, source: str) -> None:
    """Every id the tokenizer can produce must have a row in the embedding table: a larger tokenizer would
    fail (IndexError) at the first document using such a token, far from its cause."""
    rows = model.get_input_embeddings().num_embeddings
    largest = max(max(tokenizer.get_vocab().values(), default=0), *(tokenizer.all_special_ids or [0]))
    if largest >= rows:
        raise ModelLoadError(f"The tokenizer of '{source}' produces token ids up to {largest}, but the model's "
                             f"embedding table has {rows} rows (ids 0..{rows - 1}): the tokenizer is not the one the "
                             "model was trained with. Save the matching tokenizer next to the model.")


def distinct_labels(id2label: dict) -> dict[int, str]:
    """id2label with every class name distinct: names that repeat (compared as the dataset loader compares
    them, stripped and case-folded) get their class index appended, "pos (1)", so a label, a link's class
    name and a chart's legend never stand for two classes."""
    names = {int(k): str(v) for k, v in id2label.items()}
    folded = [v.strip().lower() for v in names.values()]
    return {k: f"{v} ({k})" if folded.count(v.strip().lower()) > 1 else v for k, v in names.items()}
