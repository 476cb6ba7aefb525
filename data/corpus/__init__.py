"""The corpus wing: raw text to sentence-per-line shards and a vocabulary.

download -> text_formatting (wikipedia, plain text, JSONL) -> sharding (segmentation) -> vocab,
each a restartable stage recorded in a manifest (data/manifest.py); `parallel` is the
process-pool map they and the TFRecord stage share."""
