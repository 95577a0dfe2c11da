"""Getting data in: the official files (``sources``), their conversion to Parquet (``prepare``), and your own
CSV or Hugging Face files (``importer``). Every file is written atomically and checked against ``schema``.
"""
