"""The rules' constants and the pieces every rule is built from: the levels, margins and bands, the
threshold and improvement shapes, the row builder. Their revisions, several after the first numbers,
are listed in docs/claims.md (``residshift.claims``)."""
from __future__ import annotations

import inspect
import math
import textwrap
from typing import Any, Callable, Mapping

import numpy as np

from .. import stats
from ..stats import INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED
from .row import (CLAIMS, VerdictError, VerdictRow)


# --------------------------------------------------------------------------------------------
# The rules' constants and pieces (revisions: docs/claims.md). Every study module
# and notebook imports them from here; nothing else in the package decides a claim.
# --------------------------------------------------------------------------------------------

LEVEL = 0.95  # two-sided level of every interval a rule reads
TEST_ALPHA = 0.05  # family-wise level of the Holm-corrected tests
POWER = 0.8  # power at which minimum detectable effects (MDE) are stated
LATE_FRACTION = 2 / 3  # block l (0-based) of an L-block model is "late" when l >= LATE_FRACTION * L
C1_MARGIN = 0.02  # C1: excess top-1 rate over the unigram decoder that counts as material
C1_MIN_RUN = 2  # C1.middle: consecutive quiet layers that make a middle regime
C1_EXTENT_FRACTION = 0.1  # C1.early / C1.late: a regime must span ceil(0.1 L) layers (at least 1)
C1_EXTENT_SINCE = "6dd3d8a"  # the commit that added that extent, after the first numbers (POST HOC)
# C1's noise, for sizing only (c1_reach; no rule reads it): measured, not chosen. The largest SDs, over
# the middle layers of SmolLM2-135M and Gemma-3-270M whose excess over the unigram decoder lies below
# the margin, of a window's mean excess between windows and of one position's excess within a window
# (benchmarks/c1_noise.py -> benchmarks/c1-noise.json: 0.0315 / 0.349 on SmolLM2, 0.0248 / 0.314 on
# Gemma-3); a window of P positions then varies by sqrt(between^2 + within^2 / P).
C1_NOISE_BETWEEN, C1_NOISE_WITHIN = 0.032, 0.35
C1_PLAUSIBLE_EXCESS = 0.2  # top-1 rate: the excess a regime plausibly shows (both models' late layers: ~0.2)
DEPTH_BAND = (0.5, 0.8)  # C1.depth: the band around the paper's ~0.65 (Gemma-2-2B, layer 17 of 26)
DEPTH_START, DEPTH_FRAC = 1, 0.5  # C1.depth: emergence = half-way from h_1 to h_L
LOSS_MARGIN = 0.005  # nats: the smallest loss change that counts as material
SPREAD_THRESHOLD = 0.1  # nats: a block-to-block spread that counts as "very sensitive"
PROBE_ALPHA = 0.5  # the alpha C2.layer-sensitive reads on frozen models
MIN_ATTENUATION, CONCENTRATION_RATIO = 0.05, 2.0  # C3.concentrates: 1 - alpha material / 2x others
MISALIGNMENT_MARGINS = {"logprob": 0.1, "logrank": 0.05, "depth": 0.02}  # C3.misalignment rows
BENCH_MARGIN = 0.03  # accuracy: a benchmark drop that counts as material
MAX_LATE_CANDIDATES = 3  # C2.late-cut: cells carried from selection to confirmation
MIN_GATE_MOVEMENT = 0.01  # C3.concentrates: a gate set whose alphas all moved less than this "did not move"


def is_late(layer: int, n_layers: int, fraction: float = LATE_FRACTION) -> bool:
    """Whether block ``layer`` (0-based) of an ``n_layers``-block model is a late block."""
    return layer >= fraction * n_layers


def first_late_block(n_layers: int) -> int:
    """The first late block: ``ceil(LATE_FRACTION * n_layers)`` (where figures draw the marker)."""
    return next(l for l in range(n_layers + 1) if is_late(l, n_layers))


def c1_middle_candidates(n_layers: int) -> list[int]:
    """C1.middle's candidate layers ``h_2..h_(L-2)``: strictly between the early and late test layers."""
    return list(range(2, n_layers - 1))


def c1_min_run(n_layers: int) -> int:
    """The C1.middle run length: :data:`C1_MIN_RUN` consecutive quiet layers, or fewer where a model
    has too few candidates (the 4-layer test models of the smoke profile)."""
    return max(1, min(C1_MIN_RUN, n_layers - 3))


def bonferroni_level(level: float, k: int) -> float:
    """The per-test two-sided level that keeps a family of ``k`` intervals at ``level``."""
    return 1 - (1 - level) / k


def selection_confirmation(n: int) -> tuple[np.ndarray, np.ndarray]:
    """The trained models' windows split once, with no draw: even windows select (the best fixed cut),
    odd windows confirm (every comparison with it). Interleaving keeps both halves spread over the
    validation text."""
    idx = np.arange(n)
    return idx[0::2], idx[1::2]


# --------------------------------------------------------------------------------------------
# Shared pieces of the rules
# --------------------------------------------------------------------------------------------


def _derived(values: Mapping[str, Any]) -> dict[str, Any]:
    """What a rule's text derives from its parameters: the sign-flip test's level (that of the
    interval, ``1 - level``) and the fewest seeds that can reach it."""
    level = values.get("level", LEVEL)
    if not isinstance(level, (int, float)) or not 0 < level < 1:
        return {}
    sf_alpha = 1 - float(level)
    return {"sf_alpha": sf_alpha, "sf_seeds": stats.sign_flip_units(sf_alpha)}


def _rule(*templates: str) -> Callable:
    """Append the rule(s), filled with the function's default parameters, to its docstring."""
    def wrap(fn):
        defaults = {k: p.default for k, p in inspect.signature(fn).parameters.items()
                    if p.default is not inspect.Parameter.empty}
        defaults = {**_derived(defaults), **defaults}
        text = "\n\n".join(textwrap.fill(t.format(**defaults), 96, initial_indent="    ",
                                         subsequent_indent="    ") for t in templates)
        fn.__doc__ = (fn.__doc__ or "").rstrip() + "\n\n    Rule (default parameters):\n\n" + text + "\n"
        fn.rule_templates = templates
        return fn
    return wrap


def threshold_verdict(lo: float | None, hi: float | None, threshold: float) -> str:
    """Reproduced if the CI lies above ``threshold``, not reproduced if below, else inconclusive."""
    if lo is None or hi is None or math.isnan(lo) or math.isnan(hi):
        return INCONCLUSIVE
    if lo > threshold:
        return REPRODUCED
    if hi < threshold:
        return NOT_REPRODUCED
    return INCONCLUSIVE


def improvement_verdict(lo: float | None, hi: float | None, *, sign: int, margin: float = 0.0,
                        estimate: float | None = None) -> str:
    """The improvement rule: the claim says the quantity is > 0 (``sign=+1``) or < 0 (``sign=-1``).

    Reproduced if the CI excludes 0 on the claimed side AND the ``estimate`` is material (at least
    ``margin`` on that side; without an estimate, the CI's midpoint); not reproduced if the CI
    excludes every effect of at least ``margin`` on the claimed side; inconclusive otherwise
    (:func:`improvement_why` says why).
    """
    return improvement_outcome(lo, hi, sign=sign, margin=margin, estimate=estimate)[0]


def improvement_outcome(lo: float | None, hi: float | None, *, sign: int, margin: float = 0.0,
                        estimate: float | None = None) -> tuple[str, str]:
    """:func:`improvement_verdict` with its reason: ``(verdict, why)``, ``why`` empty unless inconclusive."""
    if sign not in (1, -1):
        raise ValueError(f"sign must be +1 or -1, got {sign}")
    if margin < 0:
        raise ValueError(f"margin must be >= 0, got {margin}")
    if lo is None or hi is None or math.isnan(lo) or math.isnan(hi):
        return INCONCLUSIVE, "no interval (too few units or an undefined statistic)"
    e = (lo + hi) / 2 if estimate is None or math.isnan(estimate) else estimate
    elo, ehi, ee = min(sign * lo, sign * hi), max(sign * lo, sign * hi), sign * e  # on the claimed side
    if elo > 0 and ee >= margin:
        return REPRODUCED, ""
    if ehi < margin:
        return NOT_REPRODUCED, ""
    if elo > 0:
        return INCONCLUSIVE, (f"significant but not material: the interval excludes 0, the estimate "
                              f"{abs(e):.3g} is below the {margin:g} margin")
    return INCONCLUSIVE, f"the interval straddles the margin ({margin:g}) on the claimed side"


def threshold_why(lo: float | None, hi: float | None, threshold: float, what: str = "threshold") -> str:
    """Why :func:`threshold_verdict` / :func:`band_verdict` came out inconclusive."""
    if lo is None or hi is None or math.isnan(lo) or math.isnan(hi):
        return "no interval (too few units or an undefined statistic)"
    return f"the interval [{lo:.3g}, {hi:.3g}] straddles the {what} ({threshold:g})"


def band_verdict(lo: float | None, hi: float | None, band: tuple[float, float]) -> str:
    """Reproduced if the CI lies inside ``band``, not reproduced if entirely outside, else inconclusive."""
    if lo is None or hi is None or math.isnan(lo) or math.isnan(hi):
        return INCONCLUSIVE
    if band[0] <= lo and hi <= band[1]:
        return REPRODUCED
    if hi < band[0] or lo > band[1]:
        return NOT_REPRODUCED
    return INCONCLUSIVE


def _arr(x, name: str, ndim: int | tuple[int, ...]) -> np.ndarray:
    a = stats.as_numpy(x)
    dims = (ndim,) if isinstance(ndim, int) else ndim
    if a.ndim not in dims:
        raise ValueError(f"{name} must have {' or '.join(map(str, dims))} dimension(s), got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} holds NaN or inf: check the run that produced it")
    return a


def _per_seed(x, name: str, n_units: int | None = None) -> np.ndarray:
    """``[n_seeds, n_units]`` (a 1-D array is one seed)."""
    a = _arr(x, name, (1, 2))
    a = a[None] if a.ndim == 1 else a
    if n_units is not None and a.shape[1] != n_units:
        raise ValueError(f"{name} has {a.shape[1]} units, expected {n_units} (the same windows/items)")
    return a


def _broadcast_seeds(ref: np.ndarray, n_seeds: int, name: str) -> np.ndarray:
    if ref.shape[0] == n_seeds:
        return ref
    if ref.shape[0] == 1:
        return np.repeat(ref, n_seeds, axis=0)
    raise ValueError(f"{name} has {ref.shape[0]} seeds, expected 1 or {n_seeds}")


def _seed_flags(values, n_seeds: int, name: str, default):
    if values is None:
        return [default] * n_seeds
    values = list(values)
    if len(values) != n_seeds:
        raise ValueError(f"{name} needs one entry per seed ({n_seeds}), got {len(values)}")
    return values


def _row(claim_id: str, *, model: str, variant: str | None, verdict: str, statistic: str,
         estimate, lo, hi, level, n, rule: str, per_seed=None, details=None, source: str = "",
         claim: str | None = None, why: str | None = None) -> VerdictRow:
    """Build a row; an inconclusive one must say why (``why=`` or ``details["why"]``), others carry none."""
    details = dict(details or {})
    if why is not None:
        details["why"] = why if verdict == INCONCLUSIVE else ""
    if verdict == INCONCLUSIVE and not details.get("why"):
        raise VerdictError(f"{claim_id}: an inconclusive row must say why (details['why']); this is a bug in the rule")
    return VerdictRow(model=model, variant=variant, claim_id=claim_id,
                      claim=claim or CLAIMS[claim_id], verdict=verdict,
                      statistic=statistic, estimate=estimate, ci=(lo, hi), level=level, n=n, rule=rule,
                      per_seed=per_seed, details=details, source=source)


def _setting_prefix(claim: str, setting: str) -> str:
    if setting not in ("frozen", "training"):
        raise ValueError(f"setting must be 'frozen' (post-hoc on a pretrained model) or 'training', "
                         f"got {setting!r}")
    return claim if setting == "frozen" else claim.replace("C3.", "C3-training.").replace("C2.", "C2-training.")
