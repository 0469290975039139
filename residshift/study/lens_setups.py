"""The three sets of windows the notebooks read the lens on, each built once from the profile.

Every notebook that reads the logit lens over a corpus takes one of these :class:`LensPass` objects
(``residshift.measure.lens``) instead of rebuilding ``run_lens``'s arguments from profile keys:

- :func:`pretrained`: notebooks 01-03 and ``residshift lens`` (the ``lens_*`` keys);
- :func:`attenuated`: notebooks 04-05, the lens before and after an edit of a frozen model (the
  ``atten_lens_*`` keys, on the sweep's corpus, test split: disjoint from the sweep's windows);
- :func:`trained`: notebooks 06-09, WikiText-2 test windows at the training context (held out:
  the models train on the train split and report validation loss on the validation split);
  :func:`ladder_rung`: the same windows at a ladder rung's context (notebook 10).
"""
from __future__ import annotations

from ..core import profiles
from ..measure.lens import LensPass

ATTEN_SPLIT = "test"  # the lens windows of 04-05: disjoint from the sweep's (validation) windows
ATTEN_METRICS = ("logprob", "logrank", "top1")  # what the misalignment rule reads
TRAINED_CORPUS, TRAINED_SPLIT = "wikitext-2", "test"
TRAINED_METRICS = ("logprob", "logrank", "top1")


def pretrained(P) -> LensPass:
    """The ``lens_*`` windows of notebooks 01-03 (every metric unless a call names some)."""
    return profiles.stage(LensPass, P, "lens")


def attenuated(P) -> LensPass:
    """The ``atten_lens_*`` windows of notebooks 04-05 on the sweep's corpus, in batches of the sweep's size."""
    return profiles.stage(LensPass, P, "atten_lens", corpus=P.sweep_corpus, split=ATTEN_SPLIT, batch=P.sweep_batch,
                          metrics=ATTEN_METRICS)


def trained(P) -> LensPass:
    """The ``train_lens_*`` windows of notebooks 06-09 at the training context ``train_context``."""
    return profiles.stage(LensPass, P, "train_lens", corpus=TRAINED_CORPUS, split=TRAINED_SPLIT,
                          window=int(P.train_context), batch=8, metrics=TRAINED_METRICS)


def ladder_rung(P, context: int) -> LensPass:
    """The ladder's readings (notebook 10): the trained models' windows at a rung's context, as many as
    ``ladder_lens_windows``, every position."""
    return profiles.stage(LensPass, P, "ladder_lens", corpus=TRAINED_CORPUS, split=TRAINED_SPLIT, window=int(context),
                          batch=8, metrics=TRAINED_METRICS)
