"""Views: pure functions of one document's analysis or of per-token vectors (counts, pooling, masking, head
importance, similarity, agreement, faithfulness, attribution tables). Dataset-wide numbers are dataset/'s."""
