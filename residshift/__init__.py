"""residshift: a companion to "Residual Connections and the Causal Shift" (arXiv 2602.14760).

The package holds all the logic the notebooks call. Modules, one idea each:

- ``models``   load_model(name) -> (nnsight model, tokenizer, ModelInfo) for every model we use
- ``data``     named corpora through ``datasets``; token windows
- ``cache``    results keyed by a hash of their configuration, written atomically
- ``profiles`` smoke / default / paper sizes, in one place
- ``runner``   papermill over ``notebooks/`` with a profile
- ``plotting`` one theme; ``save_figure`` -> figures/NN-name.{png,pdf} + manifest
"""

__version__ = "0.1.0"
