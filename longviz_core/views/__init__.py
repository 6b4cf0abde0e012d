"""Views: pure functions of one document's analysis or of per-token vectors — no forward pass, no dataset, no disk
(counts, pooling, masking, similarity, agreement, attribution tables, word units). What runs the model again or
needs a labelled dataset is evaluation/'s; dataset-wide numbers are dataset/'s."""
