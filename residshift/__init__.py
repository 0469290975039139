"""residshift: a companion to "Residual Connections and the Causal Shift" (arXiv 2602.14760).

The package holds all the logic the notebooks call, in one sub-package per stage of the study.
Data flows one way: notebooks -> study -> (analysis | measure | attenuate | train) -> core.

- ``core``      what every stage stands on: ``models`` (load_model: one interface for every
                model), ``data`` (corpora, token windows), ``cache`` (results keyed by config and
                code), ``profiles`` (sizes), ``runner`` (papermill), ``paths``, ``unembed`` (the one
                final-norm -> tied-matrix -> soft-cap head and the one next-token loss),
                ``interventions`` (the one residual edit), ``fitting`` (the one fitting loop)
- ``measure``   what the residual stream holds: ``lens`` (logit lens, streamed), ``tuned_lens``,
                ``causal`` (interventions scored by loss), ``evaluate`` (the benchmark harness)
- ``attenuate`` mitigation on frozen pretrained models: ``sweep`` (layer x alpha), ``gates``
- ``train``     small tied-embedding GPTs trained with attenuation in place
- ``analysis``  ``stats`` (bootstrap, paired tests, corrections), ``verdicts`` (one schema, the rules)
- ``study``     the outputs: ``plotting`` (figures + manifest), ``figures`` (the notebooks'
                panels), ``report`` (the README's generated block)

``from residshift import load_model`` is a shortcut for ``residshift.core.models.load_model``.
"""

__version__ = "0.2.0"


def __getattr__(name: str):  # lazy, so ``import residshift`` stays cheap
    if name == "load_model":
        from .core.models import load_model

        return load_model
    raise AttributeError(f"module 'residshift' has no attribute {name!r}")
