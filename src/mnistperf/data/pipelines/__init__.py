"""Feeding batches: one module per input pipeline, named as configs name it, plus what they share.

``v1``, ``v2``, ``resident``, ``stream`` and ``litdata`` are the pipelines; ``base``, ``map_style`` and
``workers`` are what they share; ``registry`` maps a config's ``data.pipeline`` to a class.
"""
