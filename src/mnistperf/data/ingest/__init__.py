"""Getting data in: the official files, their conversion to Parquet, and your own CSV or Hugging Face files.

The official files come from ``sources``, their conversion is ``prepare``'s, and your own files are ``importer``'s.
Every file is written atomically and checked against ``schema``.
"""
