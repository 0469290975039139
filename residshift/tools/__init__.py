"""The tools wing: what the person running the study uses, apart from the study itself.

``cli`` (``python -m residshift``), ``runner`` (papermill over the notebooks), ``report`` (the
README's headline and docs/results.md), ``book`` (the offline site), ``grid_launcher``
(``train-grid``), ``lens_command`` (``residshift lens MODEL``) and ``fetch`` (``make data``). No
notebook and no stage imports this package (``tests/test_layers.py``).
"""
