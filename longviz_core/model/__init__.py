"""The model side: loading a checkpoint or dataset (loading), what each family of encoders needs (families: how it
is called, read and attributed), the notebook's inputs (encoding), one forward with attentions (analysis),
Longformer's attention kept as bands, any per-layer window (bands), the compiled loops over the bands
(_kernels), a document's units (segments: tokens, words, sentences, paragraphs) and its perturbed copies scored in
batches (copies)."""
