"""Feeding batches: one module per input pipeline, plus what they share (``base``, ``workers``, ``map_style``).

v1 ``pandas_rows``, v2 ``tensors``, ``resident``, ``stream`` and ``litdata_stream``; the registry that
maps a config's ``data.pipeline`` to a class is in :mod:`mnistperf.data.datamodule`.
"""
