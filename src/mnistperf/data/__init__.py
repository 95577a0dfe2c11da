"""The data path: raw files -> verified -> Parquet (``ingest``) -> one of five pipelines (``pipelines``) -> batches.

``schema`` is the contract between the two halves (what a prepared split holds);
``datamodule`` wires them together for Lightning. Nothing is imported here, so a module that
needs only the schema (the model's class count) does not load every pipeline.
"""
