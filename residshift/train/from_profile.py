"""One training run's :class:`~residshift.train.trainer.TrainConfig` from a profile.

``profiles.stage`` maps every ``train_*`` key to the TrainConfig field of the same name. Two keys
apply to one residual mode only and have no field of their name: ``train_gate_init`` (the learned
gates' starting logit, field ``theta_init``) and ``train_cut_site`` (where a fixed cut acts, field
``site``). :func:`profile_config` adds them by the run's mode, and the notebooks' grid, the grid
launcher, the ladder's mitigation and ``python -m residshift train`` all build their runs here, so
a command-line run is the grid's run (the same run key).

This module is not part of a run's key (the trainer does not import it): what it builds is the
config, and the config is in the key.
"""

from __future__ import annotations

from typing import Any

from ..core import profiles
from .trainer import TrainConfig

GATED_MODES = ("learned", "learned-token")


def mode_settings(P: Any, mode: str) -> dict[str, Any]:
    """The TrainConfig fields that profile ``P`` sets for residual ``mode`` only: ``theta_init`` from
    ``train_gate_init`` for the learned gates (None: the model's default), ``site`` from
    ``train_cut_site`` for a fixed cut ("block": alpha once; "sublayer": both adds, as the authors'
    harness). Other modes get neither, so their run keys do not depend on these keys. ``P``: a
    profile name, a dict of values or a namespace."""
    values = profiles.get(P) if isinstance(P, str) else P
    read = values.__getitem__ if isinstance(values, dict) else lambda k: getattr(values, k)
    if mode in GATED_MODES and read("train_gate_init") is not None:
        return {"theta_init": float(read("train_gate_init"))}
    if mode == "fixed":
        return {"site": read("train_cut_site")}
    return {}


def profile_config(P: Any, /, **given: Any) -> TrainConfig:
    """The TrainConfig of one run at profile ``P``: the ``train_*`` keys (``profiles.stage``), then
    ``given`` (fields: mode, alpha, alpha_layers, seed, ...), then :func:`mode_settings` for the
    run's mode where ``given`` does not set those fields."""
    cfg = profiles.stage(TrainConfig, P, **given)
    extra = {k: v for k, v in mode_settings(P, cfg.mode).items() if k not in given}
    return cfg.with_(**extra) if extra else cfg
