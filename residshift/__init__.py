"""residshift: a companion to "Residual Connections and the Causal Shift" (arXiv 2602.14760).

The package holds all the logic the notebooks call, in one sub-package per stage of the study.
Data flows one way (a sub-package imports only those to its right; the three stages never import
each other, and the notebooks never import the tools; ``tests/test_layers.py`` enforces it):

(notebooks | tools) → study → (measure | attenuate | train) → analysis → core

- ``core``      what every stage stands on: ``models`` (load_model: one interface for every
                model), ``data`` (corpora, token windows), ``forward`` (the residual stream and
                per-token losses of a batch), ``cache`` (results keyed by config and code; atomic
                writes), ``outputs`` (save_numbers, the manifest), ``profiles`` (sizes),
                ``records`` (RUNS.json, MANIFEST.json), ``paths``, ``unembed`` (the one head and next-token loss),
                ``interventions`` (the one residual edit), ``gating``, ``replay``, ``fitting``
                (the one fitting loop)
- ``analysis``  ``stats`` (bootstrap, paired tests, corrections, power) and ``verdicts`` (one row
                type, every rule and its constants); computes, writes nothing
- ``measure``   what the residual stream holds: ``lens`` (logit lens, streamed; the reference
                lens), ``tuned_lens``, ``causal`` (interventions scored by loss), ``evaluate``
                (the benchmark harness)
- ``attenuate`` mitigation on frozen pretrained models: ``sweep`` (layer x alpha), ``gates``
- ``train``     small tied-embedding GPTs trained with attenuation in place: ``gpt``,
                ``tokenizer``, ``data``, ``trainer``, ``final``
- ``study``     composes the stages and writes the outputs: ``plotting`` (figures + manifest),
                ``tables`` (verdict rows for readers; save_verdicts), ``tour``, ``alignment``,
                ``attenuation``, ``training`` (each notebook group's glue and panels)
- ``tools``     for the person running the study: ``cli`` (``python -m residshift``), ``runner``
                (papermill), ``report`` (the tables of the README, docs/claims.md and docs/results.md), ``book``,
                ``grid_launcher``, ``lens_command``, ``fetch`` (``make data``)

``from residshift import load_model`` is a shortcut for ``residshift.core.models.load_model``.
"""

__version__ = "0.2.0"


def __getattr__(name: str):  # lazy, so ``import residshift`` stays cheap (torch takes ~1 s; this file 0.02 s)
    if name == "load_model":
        from .core.models import load_model

        return load_model
    raise AttributeError(f"module 'residshift' has no attribute {name!r}")
