"""Verdicts: one row type, one file layout, and every claim's rule as a pure function of numbers.

**The schema.** Every verdict is a :class:`VerdictRow`: who (``model``, ``variant`` — the decoder
or the attenuation variant), what (``claim_id`` such as ``"C2.late-cut"``, the ``claim`` in words),
the outcome (``verdict``: :data:`REPRODUCED`, :data:`NOT_REPRODUCED` or :data:`INCONCLUSIVE`), the
evidence (the ``statistic``'s name, its ``estimate``, ``ci`` = (lo, hi) at ``level``, ``n`` units),
the ``rule`` in words (with its parameters filled in), optional ``per_seed`` verdicts, ``details``
and the ``source`` (the figure / numbers file the evidence comes from). This module computes and
reads; it writes nothing: a notebook saves its rows with ``residshift.study.tables.save_verdicts``
(through ``residshift.core.outputs.save_numbers``, so the manifest records it),
:func:`load_verdicts` reads them back, and ``residshift.study.tables`` renders them for the
notebooks and the README alike.

**The rules.** Each ``c*`` function below is a pure function of arrays (per-window losses, per-window
lens curves, per-item 0/1 scores, per-seed gate values) that returns rows. Every rule states, in
its docstring and in each row's ``rule`` field, the statistic, the test, the level, the
correction for multiple comparisons, and what produces each of the three outcomes; the parameters
(thresholds, margins, bands) are fixed here, before any number is looked at. Two shapes recur:

- *threshold rule* (a CI against a stated threshold ``t``): reproduced if the CI lies above ``t``,
  not reproduced if it lies below, inconclusive if it straddles ``t``;
- *improvement rule* (a CI of a paired difference whose claimed sign is known): reproduced if the
  CI excludes 0 on the claimed side; not reproduced if it excludes any effect of at least the
  stated materiality ``margin`` on the claimed side; inconclusive otherwise (a significant effect
  smaller than the margin counts as reproduced).

Intervals are percentile bootstraps over units (:mod:`.stats`); tests that feed a Holm correction
are one-sided paired t-tests. Per-seed verdicts are combined by unanimity unless a rule says
otherwise (:func:`residshift.analysis.stats.combine_verdicts`). Claim ids: ``C1``, ``C1.early``,
``C1.middle``, ``C1.late``, ``C1.depth``, ``C2.late-cut``, ``C2.layer-sensitive``,
``C3.beats-baseline``, ``C3.beats-best-cut``, ``C3.concentrates``, ``C3.misalignment``,
``C3.misalignment.rank``, ``C3.emergence-shift``, ``C3.benchmarks``, ``C2-training.alpha0-hurts``,
``C2-training.layer-sensitive``, ``C2-training.late-cut``, ``C2-training.cut-misalignment``,
``C3-training.beats-baseline``, ``C3-training.beats-best-cut``, ``C3-training.concentrates``,
``C2-training.cut-emergence-shift``, ``C3-training.misalignment``, ``C3-training.emergence-shift``,
``C4.benchmarks``.

**Trained models** (notebooks 06-08) have one more unit above the windows: the seed. Every training
rule tests across seeds (:func:`seed_test`: a paired t-interval over the per-seed differences, with
its minimum detectable effect in seed units, and beside it the exact paired sign-flip test, which a
decided verdict also needs), so the variation from training itself is what a mitigation is compared
against; :func:`seed_reach` says whether each outcome can happen at a profile's seeds within an effect
the committed grid showed to be plausible (:data:`PLAUSIBLE_EFFECT_SDS`). Every training row says in
``details["why"]`` what decided it.

**Marks.** A rule may report a row that does not count as evidence for or against the paper
(``details["evidence"]`` false, ``details["evidence_why"]``; :func:`is_evidence`): C1.late, a sanity
check, and C1's regimes under a decoder fitted to the model's output (the tuned lens). A rule changed
after the first numbers says POST HOC in its text (``details["post_hoc"]``) and, where an earlier rule
was declared, carries that rule's verdict on the same draws (``details["pre_registered_verdict"]``).
:func:`c1_reach` says which C1 outcomes a profile's lens sizes can reach (the default's are derived
from it).
"""
from __future__ import annotations

import inspect
import json
import math
import re
import textwrap
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
from scipy.stats import norm as _sp_norm
from scipy.stats import t as _sp_t

from ..core.outputs import NotJSONError, json_ready
from . import stats
from .stats import INCONCLUSIVE, NOT_REPRODUCED, OUTCOMES, REPRODUCED

__all__ = ["REPRODUCED", "NOT_REPRODUCED", "INCONCLUSIVE", "OUTCOMES", "SCHEMA", "CLAIMS",
           "VerdictRow", "VerdictError", "load_verdicts", "rows_from_json",
           "is_verdict_layout"]

SCHEMA = "residshift.verdicts/1"

# The claims in words (paper claims C1-C4, as our rules read them; see docs/paper.md).
CLAIMS: dict[str, str] = {
    "C1": "decoding h_l through the tied embedding shows three regimes in order: the input token "
          "early, nothing interpretable in the middle, the next token late",
    "C1.early": "early layers decode to the input token",
    "C1.middle": "middle layers decode to nothing interpretable (no better than a unigram guess)",
    "C1.late": "late layers decode to the next token",
    "C1.depth": "the next token emerges around 0.65 of the depth (Gemma-2-2B: ~layer 17 of 26; a "
                "reference, the depth varies by model)",
    "C1.depth.sensitivity": "as C1.depth, read with a secondary metric (a sensitivity check, not the "
                            "declared reading)",
    "C2.late-cut": "attenuating the skip path of one late block lowers the loss (frozen model)",
    "C2.layer-sensitive": "the effect of attenuation is very sensitive to the chosen layer (frozen model)",
    "C3.beats-baseline": "learned gates lower the loss of the unmodified model",
    "C3.beats-best-cut": "learned gates beat the best fixed single-block cut (the unmodified model "
                         "among the candidates)",
    "C3.concentrates": "the learned attenuation concentrates on the final layer (relative: the final "
                       "block leads every other by a stated factor)",
    "C3.concentrates.material": "the learned attenuation of the final layer is material (a stated minimum)",
    "C3.misalignment": "the gates reduce the misalignment: the input token is less decodable after "
                       "the edited block (log-probability)",
    "C3.misalignment.rank": "the gates reduce the misalignment: the input token ranks lower after "
                            "the edited block (log10 rank)",
    "C3.emergence-shift": "with the gates, the next token emerges earlier",
    "C3.benchmarks": "the gates match or improve the benchmarks",
    "C2-training.alpha0-hurts": "training with the skip path of one block cut (alpha = 0) hurts "
                                "optimisation (higher final validation loss)",
    "C2-training.layer-sensitive": "training with one attenuated block is very sensitive to the layer",
    "C2-training.late-cut": "training with one late block attenuated improves validation loss",
    "C3-training.beats-baseline": "gates trained with the model lower the validation loss of the baseline",
    "C3-training.beats-best-cut": "gates trained with the model beat the best fixed single-block cut "
                                  "(the baseline among the candidates; every trained cut is compared)",
    "C3-training.concentrates": "gates trained with the model concentrate their attenuation on the final "
                                "layer (relative: the final block leads every other by a stated factor)",
    "C3-training.concentrates.material": "the attenuation that gates trained with the model put on the final "
                                         "layer is material (a stated minimum)",
    "C3-training.misalignment": "gates trained with the model reduce the misalignment (the input token "
                                "ranks lower between the edit and the output, log10 rank) without making "
                                "the model materially worse",
    "C3-training.emergence-shift": "with gates trained with the model, the next token emerges earlier",
    "C2-training.cut-emergence-shift": "with a fixed cut trained with the model, the next token emerges earlier",
    "C2-training.cut-misalignment": "a fixed cut trained with the model reduces the misalignment (the input "
                                    "token ranks lower after it) without making the model materially worse",
    "C4.benchmarks": "the attenuated model matches or improves the baseline on benchmarks",
}

_CLAIM_ID = re.compile(r"^C[1-4](-training)?(\.[a-z0-9-]+)*$")


class VerdictError(ValueError):
    """A verdict row or file that does not follow the schema; the message names the fix."""


# --------------------------------------------------------------------------------------------
# The rules' constants and pieces: fixed here, before any number is looked at. Every study module
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
# The row type, save and load
# --------------------------------------------------------------------------------------------


def _finite_or_none(x: Any) -> float | None:
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def _plain(details: Any) -> Any:
    """``details`` made JSON-safe (``core.outputs.json_ready``, strict), or a :class:`VerdictError`."""
    try:
        return json_ready(details, strict=True, what="details")
    except NotJSONError as err:
        raise VerdictError(str(err)) from None


@dataclass(frozen=True)
class VerdictRow:
    """One verdict on one claim for one model (and variant). See the module docstring."""

    model: str
    variant: str | None
    claim_id: str
    claim: str
    verdict: str
    statistic: str
    estimate: float | None
    ci: tuple[float | None, float | None]
    level: float | None
    n: int | None
    rule: str
    per_seed: tuple[str, ...] | None = None
    details: dict[str, Any] = field(default_factory=dict)
    source: str = ""

    def __post_init__(self):
        if self.verdict not in OUTCOMES:
            raise VerdictError(f"verdict {self.verdict!r} is not one of {OUTCOMES}")
        if not _CLAIM_ID.match(str(self.claim_id)):
            raise VerdictError(f"claim_id {self.claim_id!r} must look like 'C2.late-cut' "
                               "(C1-C4, optional '-training', then dotted lowercase parts)")
        if not self.model or not self.rule or not self.claim:
            raise VerdictError("a verdict row needs a model, the claim in words and the rule in words")
        if self.level is not None and not 0 < self.level < 1:
            raise VerdictError(f"level must lie in (0, 1), got {self.level}")
        ci = tuple(self.ci) if self.ci is not None else (None, None)
        if len(ci) != 2:
            raise VerdictError(f"ci must be (lo, hi), got {self.ci!r}")
        object.__setattr__(self, "ci", (_finite_or_none(ci[0]), _finite_or_none(ci[1])))
        object.__setattr__(self, "estimate", _finite_or_none(self.estimate))
        if self.n is not None:
            object.__setattr__(self, "n", int(self.n))
        if self.per_seed is not None:
            seeds = tuple(self.per_seed)
            bad = [v for v in seeds if v not in OUTCOMES]
            if bad:
                raise VerdictError(f"per-seed verdicts {bad} are not in {OUTCOMES}")
            object.__setattr__(self, "per_seed", seeds)
        object.__setattr__(self, "details", _plain(dict(self.details)))

    def as_dict(self) -> dict[str, Any]:
        out = {"schema": SCHEMA}
        for f in fields(self):
            v = getattr(self, f.name)
            out[f.name] = list(v) if isinstance(v, tuple) else v
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "VerdictRow":
        if not isinstance(d, Mapping) or d.get("schema") != SCHEMA:
            raise VerdictError(f"not a verdict row of layout {SCHEMA!r}: {str(d)[:80]}")
        names = {f.name for f in fields(cls)}
        missing = names - set(d) - {"per_seed", "details", "source"}
        extra = set(d) - names - {"schema"}
        if missing or extra:
            raise VerdictError(f"verdict row fields differ from the schema: missing {sorted(missing)}, "
                               f"unknown {sorted(extra)}")
        return cls(**{k: d[k] for k in names if k in d})


def is_verdict_layout(data: Any) -> bool:
    """True when ``data`` (a parsed JSON file) is a non-empty list of rows of this schema."""
    return (isinstance(data, list) and bool(data)
            and all(isinstance(r, Mapping) and r.get("schema") == SCHEMA for r in data))


def rows_from_json(data: Any, where: str = "the file") -> list[VerdictRow]:
    if not is_verdict_layout(data):
        raise VerdictError(f"{where} is not in the verdict layout {SCHEMA!r} (an older notebook wrote "
                           "it?): rerun the notebook that writes it, which saves through "
                           "residshift.study.tables.save_verdicts")
    return [VerdictRow.from_dict(r) for r in data]


def load_verdicts(path) -> list[VerdictRow]:
    """Read a file written by ``residshift.study.tables.save_verdicts``."""
    path = Path(path)
    if not path.is_file():
        raise VerdictError(f"{path} does not exist: run the notebook that writes it")
    return rows_from_json(json.loads(path.read_text()), str(path))


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


# --------------------------------------------------------------------------------------------
# C1: three regimes of the logit lens, and the emergence depth
# --------------------------------------------------------------------------------------------


# details["evidence_why"] of the rows C1 does not count as evidence; the text before the colon names the kind
C1_FITTED_WHY = (
    "decoder fitted to the model's output: a tuned lens is trained towards the final next-token "
    "distribution, so it reads every layer as a next-token guess; by construction an input regime cannot "
    "appear and a quiet middle only means its fit failed")
C1_LATE_WHY = (
    "sanity check: any trained LM decodes the next token in its last layers (they are trained to predict "
    "it through the same decoder), so this tests the measurement, not the paper")
C1_NOT_EVIDENCE = (
    "Not counted as evidence, either way (details: evidence = false, evidence_why), when the decoder was "
    "fitted towards the model's final next-token distribution (a tuned lens): such a decoder reads every "
    "layer as a next-token guess, so by construction an input regime cannot appear and a quiet middle "
    "only means its fit failed.")
C1_EARLY_RULE = (
    "C1.early. POST HOC: the extent requirement (k layers from h_1, not h_1 alone) was added at commit "
    + C1_EXTENT_SINCE + ", after the first numbers were seen, and it changed a verdict (Gemma-3-270M's "
    "logit lens: reproduced at h_1 alone, not reproduced with k = 2), so this verdict is exploratory. "
    "The rule declared before the numbers, computed beside it on the same draws (details: "
    "pre_registered_verdict): the threshold rule at h_1 alone (reproduced if the {level} CI of d_in(1) "
    "lies above the margin {margin}, not reproduced if below, inconclusive otherwise). "
    "Judged on h_1..h_L only (h_0 is the token's own embedding: input alignment there is "
    "true by construction), and on the regime's extent, not one layer. Per window, d_in(l) = top-1 "
    "rate of the input token under the decoder at h_l minus the unigram decoder's top-1 rate for "
    "the input token (it always predicts the reference corpus's most frequent token) on the same "
    "positions, with a two-sided {level} percentile bootstrap CI over windows per layer. The early "
    "regime's extent: the run of consecutive layers h_1, h_2, ... whose CI lies above the margin "
    "{margin} (absolute top-1 rate). Required extent k = max(1, ceil({extent_fraction} L)) layers (a "
    "tenth of the depth: 'early layers', not the first state after the embedding). Reproduced if "
    "the run covers h_1..h_k (an intersection of k tests: no correction needed); not reproduced if "
    "the first layer of h_1..h_k outside the run has its CI below the margin (the regime provably "
    "ends too early); inconclusive if that CI contains the margin, or the decoder did not converge "
    "at that layer. Statistic shown: d_in at the deciding layer (h_k when reproduced, else the "
    "first layer outside the run). " + C1_NOT_EVIDENCE)
C1_MIDDLE_RULE = (
    "C1.middle. Candidate layers h_2..h_(L-2), the m layers strictly between the first early and "
    "the last late test layers. Per window, d_in(l) and d_next(l) = the decoder's top-1 rate for "
    "the input / next token at h_l minus the unigram decoder's, bootstrapped over windows with "
    "shared draws. A layer is quiet when the upper bounds of BOTH d_in(l) and d_next(l), from "
    "two-sided normal intervals with the bootstrap standard error at level 1 - (1 - {level})/m "
    "(Bonferroni over the m candidates; percentile intervals are unstable that far in the tails), "
    "lie below the margin {margin} (upper bound below the margin, not merely a CI that overlaps 0); "
    "busy when the lower bound (level {level}) of either lies above the margin. A layer where the "
    "decoder did not converge is neither. Reproduced if at least {min_run} consecutive candidate "
    "layers are quiet; not reproduced if every candidate layer is busy; inconclusive otherwise. "
    "Statistic shown: the larger of the two excesses at the quietest layer, with its Bonferroni "
    "interval. " + C1_NOT_EVIDENCE)
C1_LATE_RULE = (
    "C1.late. A SANITY CHECK, not evidence (details: evidence = false): what it rules out is a model "
    "whose next token beats a frequency guess by less than the margin somewhere in its last k = "
    "max(1, ceil({extent_fraction} L)) layers before the output, i.e. whose next-token information "
    "appears only in its final blocks; any "
    "trained LM nearly guarantees the opposite (its last layers are trained to predict the next token "
    "through the same decoder), so 'reproduced' confirms the measurement (decoder, baseline, windows) "
    "rather than the paper, and 'not reproduced' would point at the measurement first. POST HOC: the "
    "extent (k layers, not h_(L-1) alone) was added at commit " + C1_EXTENT_SINCE + ", after the first "
    "numbers were seen; the rule declared before them, the threshold rule at h_(L-1) alone (the {level} "
    "CI of d_next(L-1) above the margin reproduces, below it does not, containing it is inconclusive), "
    "is computed beside it (details: pre_registered_verdict). "
    "The late regime's extent: the run of consecutive layers h_(L-1), h_(L-2), ... (down "
    "from the last state before the output; at h_L the next-token top-1 is the model's own "
    "accuracy, above a frequency guess for any trained model) whose two-sided {level} percentile "
    "bootstrap CI of d_next(l) = next-token top-1 rate minus the unigram decoder's lies above the "
    "margin {margin}. Required extent k = max(1, ceil({extent_fraction} L)). Reproduced if the run "
    "covers h_(L-k)..h_(L-1); not reproduced if the first layer of those outside the run has its CI "
    "below the margin; inconclusive if it contains the margin, or the decoder did not converge there.")
C1_RULE = (
    "C1. Reproduced if C1.early, C1.middle and C1.late are all reproduced (the regimes are then in "
    "order: an early run from h_1, a quiet run inside h_2..h_(L-2) after it, a late run up to "
    "h_(L-1)); an intersection of three claims, so no correction is needed for 'reproduced'. Not "
    "reproduced if any of the three is not reproduced; inconclusive otherwise. POST HOC where its "
    "parts are (the extent of C1.early and C1.late): the verdict of the same combination of the parts' "
    "pre-registered verdicts is shown beside it (details: pre_registered_verdict). Evidence only where "
    "C1.early and C1.middle are (not for a decoder fitted to the model's output: details: evidence). "
    "The emergence depth is judged separately (C1.depth), on independent bootstrap draws.")


def c1_min_extent(n_layers: int, fraction: float = None) -> int:
    """The extent C1.early and C1.late require: ``max(1, ceil(C1_EXTENT_FRACTION * n_layers))`` layers."""
    f = C1_EXTENT_FRACTION if fraction is None else fraction
    return max(1, math.ceil(f * n_layers - 1e-9))


def _pre_registered(m: np.ndarray, lo: np.ndarray, hi: np.ndarray, layer: int, margin: float,
                    unconverged: set[int]) -> dict[str, Any]:
    """The rule C1.early / C1.late had before their extent was added (commit :data:`C1_EXTENT_SINCE`):
    the threshold rule at one layer (h_1 / h_(L-1)); a layer whose decoder did not converge is not
    read (inconclusive), as in the current rule."""
    v = INCONCLUSIVE if layer in unconverged else threshold_verdict(lo[layer], hi[layer], margin)
    return {"verdict": v, "layer": layer, "estimate": float(m[layer]), "ci": [float(lo[layer]), float(hi[layer])],
            "rule": f"threshold rule at h_{layer} alone: the CI above the margin {margin:g} reproduces, below it "
                    "does not, containing it is inconclusive"}


def _joint(parts: Sequence[str]) -> str:
    """C1's combination of its parts: reproduced if all are, not reproduced if any is not."""
    if all(v == REPRODUCED for v in parts):
        return REPRODUCED
    return NOT_REPRODUCED if any(v == NOT_REPRODUCED for v in parts) else INCONCLUSIVE


def is_evidence(row: VerdictRow) -> bool:
    """Whether a row counts as evidence for or against the paper: every row does unless its rule marked
    it otherwise (``details["evidence"] is False``, with ``details["evidence_why"]``: C1.late, a sanity
    check; C1.early / C1.middle / C1 under a decoder fitted to the model's output)."""
    return row.details.get("evidence") is not False


def _not_evidence(why: str) -> dict[str, Any]:
    return {"evidence": False, "evidence_why": why}


def _extent(lo: np.ndarray, hi: np.ndarray, order: list[int], k: int, margin: float,
            unconverged: set[int]) -> tuple[str, str, list[int], int]:
    """Walk ``order`` (layers from the regime's end inwards) while the CI lies above ``margin``.
    Returns (verdict, why, the run, the deciding layer)."""
    run = []
    for l in order:
        if l in unconverged or not lo[l] > margin:
            break
        run.append(l)
    if len(run) >= k:
        return REPRODUCED, "", run, order[k - 1]
    f = order[len(run)]
    if f in unconverged:
        return INCONCLUSIVE, f"the decoder did not converge at h_{f} (a layer the required run needs)", run, f
    if hi[f] < margin:
        return NOT_REPRODUCED, "", run, f
    return INCONCLUSIVE, (f"the run stops at h_{f}, whose interval [{lo[f]:.3g}, {hi[f]:.3g}] contains the "
                          f"margin {margin:g} ({len(run)} of the {k} required layers decided)"), run, f


@_rule(C1_EARLY_RULE, C1_MIDDLE_RULE, C1_LATE_RULE, C1_RULE)
def c1_regimes(top1_input, top1_next, unigram_input, unigram_next, *, model: str, decoder: str,
               margin: float = C1_MARGIN, min_run: int = C1_MIN_RUN,
               extent_fraction: float = C1_EXTENT_FRACTION, unconverged: Sequence[int] = (),
               fitted_to_output: bool = False, n_boot: int = 1000, seed: int = 0, level: float = LEVEL,
               n_positions: int | None = None, source: str = "") -> list[VerdictRow]:
    """Claim C1's three regimes for one model and decoder (logit lens, tuned lens, ...).

    ``top1_input``, ``top1_next``: ``[n_windows, L+1]`` per-window top-1 rates at ``h_0..h_L``
    (``LensResult.per_seq["top1_input"]`` etc.); ``unigram_input``, ``unigram_next``: ``[n_windows]``
    per-window top-1 rates of the unigram decoder on the same positions
    (``residshift.measure.lens.unigram_baseline(result, counts)["top1_input"]`` etc.).
    ``unconverged``: residual indices l whose decoder did not converge (a tuned-lens translator still
    improving at its step cap): no test reads them, and a regime that needs one is inconclusive.
    ``fitted_to_output``: the decoder was fitted towards the model's final next-token distribution (a
    tuned lens): its C1.early, C1.middle and C1 rows are marked not evidence (:func:`is_evidence`).
    C1.late is always marked: a sanity check. C1.early, C1.late and C1 carry
    ``details["pre_registered_verdict"]``, the verdict of the rule declared before the first numbers
    (``details["pre_registered"]``: its layer, estimate and interval); ``details["post_hoc"]`` is true.
    ``n_positions``: the analysed positions per window; when given, each row whose sub-rule cannot reach
    every outcome at these windows (:func:`c1_reach`, :func:`c1_underpowered`) is marked
    ``details["underpowered"]`` (the reason; an inconclusive row's ``why`` says it too), the verdict
    itself unchanged.
    Returns rows ``C1.early``, ``C1.middle``, ``C1.late`` and ``C1``.
    """
    ti, tn = _arr(top1_input, "top1_input", 2), _arr(top1_next, "top1_next", 2)
    ui, un = _arr(unigram_input, "unigram_input", 1), _arr(unigram_next, "unigram_next", 1)
    if ti.shape != tn.shape or ui.shape != un.shape or ui.shape[0] != ti.shape[0]:
        raise ValueError(f"shapes differ: top1 {ti.shape} / {tn.shape}, unigram {ui.shape} / {un.shape} "
                         "(one row per window, the same windows)")
    n, L = ti.shape[0], ti.shape[1] - 1
    cand = c1_middle_candidates(L)
    if len(cand) < min_run:
        raise ValueError(f"{L} layers leave {len(cand)} middle candidates (h_2..h_(L-2)) for a run of "
                         f"{min_run}: use min_run <= {max(1, len(cand))} or a deeper model")
    skip = {int(l) for l in unconverged}
    if any(not 0 <= l <= L for l in skip):
        raise ValueError(f"unconverged layers must be residual indices within 0..{L}, got {sorted(skip)}")
    k = c1_min_extent(L, extent_fraction)
    if k > L - 1:
        raise ValueError(f"an extent of {k} layers does not fit in h_1..h_{L - 1}: lower extent_fraction")
    d_in, d_next = ti - ui[:, None], tn - un[:, None]
    idx = stats.bootstrap_indices(n, n_boot, seed)
    b_in, b_next = d_in[idx].mean(axis=1), d_next[idx].mean(axis=1)  # [n_boot, L+1]
    m_in, m_next = d_in.mean(0), d_next.mean(0)
    lo_in, hi_in = stats.percentile_ci(b_in, level)
    lo_nx, hi_nx = stats.percentile_ci(b_next, level)
    level_b = bonferroni_level(level, len(cand))
    z_b = float(_sp_norm.ppf(1 - (1 - level_b) / 2))  # Bonferroni: normal interval, bootstrap SE
    blo_in, bhi_in = m_in - z_b * b_in.std(axis=0, ddof=1), m_in + z_b * b_in.std(axis=0, ddof=1)
    blo_nx, bhi_nx = m_next - z_b * b_next.std(axis=0, ddof=1), m_next + z_b * b_next.std(axis=0, ddof=1)
    who = dict(model=model, variant=decoder, source=source)
    p = dict(level=level, margin=margin, min_run=min_run, extent_fraction=extent_fraction)
    common = {"required_extent": k, "unconverged": sorted(skip), "margin": margin}

    fitted = _not_evidence(C1_FITTED_WHY) if fitted_to_output else {}
    pre_e = _pre_registered(m_in, lo_in, hi_in, 1, margin, skip)
    pre_l = _pre_registered(m_next, lo_nx, hi_nx, L - 1, margin, skip)

    early, why_e, run_e, f_e = _extent(lo_in, hi_in, list(range(1, L)), k, margin, skip)
    r_early = _row("C1.early", **who, verdict=early, why=why_e,
                   statistic=f"input top-1 minus unigram top-1 at h_{f_e} (early run h_1..: {len(run_e)} layers)",
                   estimate=m_in[f_e], lo=lo_in[f_e], hi=hi_in[f_e], level=level, n=n,
                   rule=C1_EARLY_RULE.format(**p),
                   details={"layer": f_e, "extent": run_e, **common, "top1_input": float(ti[:, 1].mean()),
                            "unigram_input": float(ui.mean()), "excess_lo": lo_in.tolist(),
                            "excess_hi": hi_in.tolist(), "post_hoc": True,
                            "pre_registered_verdict": pre_e["verdict"], "pre_registered": pre_e, **fitted})
    late, why_l, run_l, f_l = _extent(lo_nx, hi_nx, list(range(L - 1, 0, -1)), k, margin, skip)
    r_late = _row("C1.late", **who, verdict=late, why=why_l,
                  statistic=f"next top-1 minus unigram top-1 at h_{f_l} (late run ..h_{L - 1}: {len(run_l)} layers)",
                  estimate=m_next[f_l], lo=lo_nx[f_l], hi=hi_nx[f_l], level=level, n=n,
                  rule=C1_LATE_RULE.format(**p),
                  details={"layer": f_l, "extent": sorted(run_l), **common,
                           "top1_next": float(tn[:, L - 1].mean()), "unigram_next": float(un.mean()),
                           "excess_lo": lo_nx.tolist(), "excess_hi": hi_nx.tolist(), "post_hoc": True,
                           "pre_registered_verdict": pre_l["verdict"], "pre_registered": pre_l,
                           **_not_evidence(C1_LATE_WHY)})

    quiet = [l for l in cand if l not in skip and bhi_in[l] < margin and bhi_nx[l] < margin]
    busy = [l for l in cand if l not in skip and (lo_in[l] > margin or lo_nx[l] > margin)]
    longest, run = [], []
    for l in cand:  # the longest run of consecutive quiet layers
        run = run + [l] if l in quiet else []
        longest = run if len(run) > len(longest) else longest
    why_m = ""
    if len(longest) >= min_run:
        middle = REPRODUCED
    elif len(busy) == len(cand):
        middle = NOT_REPRODUCED
    else:
        middle = INCONCLUSIVE
        open_ = [l for l in cand if l not in quiet and l not in busy and l not in skip]
        parts_m = ([f"{len(open_)} undecided (e.g. h_{open_[0]})"] if open_ else []) + (
            [f"{len(skip & set(cand))} not converged"] if skip & set(cand) else [])
        why_m = (f"no run of {min_run} quiet layer{'s' if min_run > 1 else ''} (longest {len(longest)}), and not "
                 f"every candidate is busy: " + "; ".join(parts_m))
    worst_hi = {l: max(bhi_in[l], bhi_nx[l]) for l in cand}
    lq = min(cand, key=lambda l: worst_hi[l])
    use_in = bhi_in[lq] >= bhi_nx[lq]
    r_mid = _row("C1.middle", **who, verdict=middle, why=why_m,
                 statistic=f"larger excess top-1 over unigram (input or next) at the quietest middle "
                           f"layer h_{lq} ({'input' if use_in else 'next'})",
                 estimate=(m_in if use_in else m_next)[lq],
                 lo=(blo_in if use_in else blo_nx)[lq], hi=(bhi_in if use_in else bhi_nx)[lq],
                 level=level_b, n=n, rule=C1_MIDDLE_RULE.format(**p),
                 details={"candidates": cand, "quiet_layers": quiet, "busy_layers": busy,
                          "longest_quiet_run": longest, "bonferroni_level": level_b, "margin": margin,
                          "unconverged": sorted(skip),
                          "excess_input": m_in.tolist(), "excess_next": m_next.tolist(),
                          "upper_input_bonferroni": bhi_in.tolist(), "upper_next_bonferroni": bhi_nx.tolist(),
                          **fitted})
    parts = {"early": early, "middle": middle, "late": late}
    overall = _joint(list(parts.values()))
    why_all = "" if overall != INCONCLUSIVE else "inconclusive part(s): " + ", ".join(
        f"C1.{k_}" for k_, v in parts.items() if v == INCONCLUSIVE)
    pre_all = _joint([pre_e["verdict"], middle, pre_l["verdict"]])
    r_all = _row("C1", **who, verdict=overall, why=why_all, statistic="three regimes in order (early, middle, late)",
                 estimate=None, lo=None, hi=None, level=None, n=n, rule=C1_RULE.format(**p),
                 details={**parts, "n_layers": L, "post_hoc": True, "pre_registered_verdict": pre_all, **fitted})
    rows = [r_early, r_mid, r_late, r_all]
    if n_positions is not None and n >= 2:
        weak = c1_underpowered(n, n_positions, L, margin=margin, level=level)
        for r in rows:
            _mark_underpowered(r, weak.get(r.claim_id, ""))
    return rows


UNDERPOWERED = "underpowered at this profile"  # the words a row marked by c1_underpowered starts with


def c1_underpowered(n_windows: int, n_positions: int, n_layers: int, **kw) -> dict[str, str]:
    """Per C1 claim id (``C1.early``, ``C1.middle``, ``C1.late``, ``C1``), why its rule cannot reach
    every outcome with 80% power at ``n_windows`` windows of ``n_positions`` analysed positions on a
    model of ``n_layers`` blocks (:func:`c1_reach`, ``kw`` as its): ``"underpowered at this profile:
    ..."`` naming the unreachable outcomes with their MDE, or ``""`` where every outcome is reachable.
    ``C1`` is underpowered when any of its parts is. The default profile's windows give ``""`` on both
    embedded models (its windows are :func:`c1_min_windows`'); the class profile's do not."""
    reach = c1_reach(n_windows, n_positions, n_layers, **kw)
    margin = reach["margin"]
    out = {}
    for part in ("early", "middle", "late"):
        r = reach[part]
        gone = [what for key, what in (("reproduced", REPRODUCED), ("not_reproduced", NOT_REPRODUCED)) if not r[key]]
        out[f"C1.{part}"] = "" if not gone else (
            f"{UNDERPOWERED}: {n_windows} windows x {n_positions} positions cannot reach "
            f"'{' or '.join(gone)}' with 80% power (MDE {r['mde']:.3g}, margin {margin:g}; "
            f"{c1_min_windows(n_positions, [n_layers], **kw)} windows would)")
    weak = [k for k, v in out.items() if v]
    out["C1"] = "" if not weak else f"{UNDERPOWERED}: its part{'s' if len(weak) > 1 else ''} {', '.join(weak)}"
    return out


def _mark_underpowered(row: VerdictRow, why: str) -> None:
    if not why:
        return
    row.details["underpowered"] = why
    if row.verdict == INCONCLUSIVE:
        row.details["why"] = f"{row.details['why']}; {why}" if row.details.get("why") else why


def c1_power(top1_input, top1_next, unigram_input, unigram_next, *, alpha: float = TEST_ALPHA,
             power: float = POWER) -> dict[str, float | None]:
    """What C1's tests can detect with these windows: the minimum detectable effect (two-sided
    ``alpha``, ``power``; :func:`residshift.analysis.stats.mde_paired_mean` from the per-window SD)
    of the excess top-1 rate over the unigram decoder at C1.early's layer h_1, at C1.late's h_(L-1)
    and, Bonferroni-corrected over C1.middle's candidates, at the noisiest candidate layer.
    Arguments as :func:`c1_regimes`'. Returns ``{"early", "late", "middle"}`` (``middle`` None when
    the model has no middle candidate)."""
    ti, tn = _arr(top1_input, "top1_input", 2), _arr(top1_next, "top1_next", 2)
    ui, un = _arr(unigram_input, "unigram_input", 1), _arr(unigram_next, "unigram_next", 1)
    n, L = ti.shape[0], ti.shape[1] - 1
    d_in, d_nx = ti - ui[:, None], tn - un[:, None]
    cand = c1_middle_candidates(L)

    def sd(x):
        return float(np.std(x, ddof=1))

    def mde(s, a=alpha):
        return stats.mde_paired_mean(s, n, alpha=a, power=power, sided="two")

    return {"early": mde(sd(d_in[:, 1])), "late": mde(sd(d_nx[:, L - 1])),
            "middle": (mde(max(max(sd(d_in[:, l]), sd(d_nx[:, l])) for l in cand), alpha / len(cand))
                       if cand else None)}


def c1_reach(n_windows: int, n_positions: int, n_layers: int, *, sd_between: float = C1_NOISE_BETWEEN,
             sd_within: float = C1_NOISE_WITHIN, margin: float = C1_MARGIN, level: float = LEVEL,
             power: float = POWER, plausible: float = C1_PLAUSIBLE_EXCESS) -> dict[str, Any]:
    """Can each outcome of C1.early, C1.middle and C1.late happen, with ``power``, at ``n_windows``
    windows of ``n_positions`` analysed positions on a model of ``n_layers`` blocks?

    The noise of a layer at the unigram level: a window's mean excess varies over windows by
    ``sd = sqrt(sd_between^2 + sd_within^2 / n_positions)`` (defaults: :data:`C1_NOISE_BETWEEN`,
    :data:`C1_NOISE_WITHIN`, measured on both models), so ``se = sd / sqrt(n_windows)``. Per sub-rule,
    ``half_width`` is the half-width of the interval its rule reads (C1.early / C1.late: two-sided
    ``level``; C1.middle's quiet test: Bonferroni over its ``m = L - 3`` candidates, ``bonferroni_level``)
    and ``mde`` that test's minimum detectable effect at ``power`` (``stats.mde_paired_mean``, as
    :func:`c1_power`). An outcome is reachable when a layer with a plausible true excess gives it with
    probability ``power`` (per layer and token):

    - C1.early / C1.late: *reproduced* if ``margin + mde <= plausible`` (a regime whose excess clears the
      margin by the MDE); *not reproduced* if ``mde <= margin`` (a layer exactly at the unigram level,
      excess 0, has its interval below the margin); *inconclusive* always (a layer at the margin);
    - C1.middle: *reproduced* if ``mde <= margin`` with the Bonferroni level (a layer exactly at the
      unigram level is certified quiet); *not reproduced* if ``margin + mde <= plausible`` at ``level``
      (every candidate busy); *inconclusive* always.

    Returns ``{"early", "middle", "late"}``, each ``{"half_width", "mde", "reproduced",
    "not_reproduced", "inconclusive"}`` (middle also ``"family"``, m), with ``"sd_window"``, ``"se"``,
    ``"reachable"`` (every outcome of every sub-rule) and ``"why"`` (what is missing; ``""`` if none).
    """
    if n_windows < 2 or n_positions < 1:
        raise ValueError(f"need at least 2 windows and 1 position per window, got {n_windows} x {n_positions}")
    m = len(c1_middle_candidates(n_layers))
    if m < 1:
        raise ValueError(f"{n_layers} blocks leave no middle candidate (h_2..h_(L-2)): C1 needs at least 4")
    sd = math.sqrt(sd_between ** 2 + sd_within ** 2 / n_positions)
    se = sd / math.sqrt(n_windows)
    alpha = 1 - level
    z, z_b = float(_sp_norm.ppf(1 - alpha / 2)), float(_sp_norm.ppf(1 - alpha / (2 * m)))
    mde = stats.mde_paired_mean(sd, n_windows, alpha=alpha, power=power, sided="two")
    mde_b = stats.mde_paired_mean(sd, n_windows, alpha=alpha / m, power=power, sided="two")

    def side(hw, quiet_mde, busy_mde):
        return {"half_width": hw, "mde": quiet_mde, "reproduced": margin + busy_mde <= plausible,
                "not_reproduced": quiet_mde <= margin, "inconclusive": True}

    out = {"n_windows": n_windows, "n_positions": n_positions, "n_layers": n_layers, "sd_window": sd, "se": se,
           "margin": margin, "early": side(z * se, mde, mde), "late": side(z * se, mde, mde),
           "middle": {"half_width": z_b * se, "mde": mde_b, "family": m, "reproduced": mde_b <= margin,
                      "not_reproduced": margin + mde <= plausible, "inconclusive": True}}
    missing = []
    for part in ("early", "middle", "late"):
        for outcome, what in (("reproduced", REPRODUCED), ("not_reproduced", NOT_REPRODUCED)):
            if not out[part][outcome]:
                missing.append(f"C1.{part} {what} (MDE {out[part]['mde']:.3g}, half-width "
                               f"{out[part]['half_width']:.3g}, margin {margin:g})")
    out["reachable"] = not missing
    out["why"] = "" if not missing else (f"at {n_windows} windows x {n_positions} positions ({n_layers} blocks) "
                                         "unreachable: " + "; ".join(missing))
    return out


def c1_min_windows(n_positions: int, layer_counts: Sequence[int], **kw) -> int:
    """The fewest windows of ``n_positions`` analysed positions at which :func:`c1_reach` finds every
    outcome of C1's sub-rules reachable on models of each of ``layer_counts`` blocks (``kw`` as its)."""
    if not layer_counts:
        raise ValueError("give the models' block counts, e.g. [30, 18]")
    n = 2
    while not all(c1_reach(n, n_positions, L, **kw)["reachable"] for L in layer_counts):
        n += 1
        if n > 1_000_000:
            raise ValueError(f"no window count up to 10^6 reaches every outcome at {n_positions} positions")
    return n


# Metrics whose half-way depth means something, with their orientation (+1: larger = more aligned).
DEPTH_METRICS: dict[str, int] = {"top1": 1, "prob": 1, "logrank": -1}

DEPTH_PRIMARY = "top1"  # C1.depth's declared metric; the others are sensitivity rows (C1.depth.sensitivity)

C1_DEPTH_RULE = (
    "C1.depth. POST HOC: this rule was written after the first numbers were seen, so its verdicts "
    "are exploratory; declared for every later run: the primary metric is {primary} (top-1 rate of "
    "the next token) and the others ({metrics}) are sensitivity rows (C1.depth.sensitivity). Per "
    "metric, the next-token emergence: the first (interpolated) layer where the mean next-token "
    "curve has covered {frac} of its way from h_{start} to h_L, as relative depth l/L, with a "
    "two-sided {level} percentile bootstrap CI over windows (draws independent of C1's). Compared "
    "with the band [{band_lo}, {band_hi}] around the paper's Gemma-2-2B reference (~layer 17 of 26 = "
    "0.65; 'around' and 'varies by model': +-0.15, about +-4 of 26 layers). Reproduced if the CI "
    "lies inside the band; not reproduced if it lies entirely outside; inconclusive if it straddles "
    "an edge, if the curve does not rise towards the next token (or is flat in more than {tail} of "
    "the resamples), or if a defensible preprocessing change (raw instead of detokenized text, "
    "measured on the first windows of the same draw) moves the depth by more than the half-width "
    "of its interval: a depth the study cannot pin down more finely than that choice. No "
    "correction across metrics (readings of one depth, not separate claims).")


@_rule(C1_DEPTH_RULE.replace("{metrics}", "top1, prob, logrank").replace("{band_lo}", str(DEPTH_BAND[0]))
       .replace("{band_hi}", str(DEPTH_BAND[1])).replace("{tail}", "(1 - level)/2")
       .replace("{primary}", DEPTH_PRIMARY))
def c1_depth(next_curves: Mapping[str, Any], *, model: str, decoder: str,
             band: tuple[float, float] = DEPTH_BAND, start: int = DEPTH_START, frac: float = DEPTH_FRAC,
             preprocessing: Mapping[str, Mapping[str, Any]] | None = None, primary: str = DEPTH_PRIMARY,
             n_boot: int = 1000, seed: int = 0, level: float = LEVEL, source: str = "") -> list[VerdictRow]:
    """The next-token emergence depth vs the paper's reference band, one row per metric.

    ``next_curves``: metric -> ``[n_windows, L+1]`` per-window next-token curves
    (``LensResult.per_seq["top1_next"]`` etc.), metrics among :data:`DEPTH_METRICS`. The bootstrap
    uses ``seed + 1`` so its draws differ from :func:`c1_regimes`' with the same seed. The
    ``primary`` metric's row is ``C1.depth``; the others are ``C1.depth.sensitivity``.
    ``preprocessing``: setting name (e.g. ``"raw WikiText"``) -> metric -> ``[k, L+1]`` curves of the
    FIRST k windows of ``next_curves`` under that setting; a depth that moves by more than its
    interval's half-width under any setting is inconclusive.
    """
    lo_b, hi_b = band
    if not 0 <= lo_b < hi_b <= 1:
        raise ValueError(f"band must be (lo, hi) with 0 <= lo < hi <= 1, got {band}")
    bad = [m for m in next_curves if m not in DEPTH_METRICS]
    if bad or not next_curves:
        raise ValueError(f"metrics {bad or '(none)'} have no meaningful half-way depth; use some of "
                         f"{list(DEPTH_METRICS)}")
    if primary not in DEPTH_METRICS:
        raise ValueError(f"primary must be one of {list(DEPTH_METRICS)}, got {primary!r}")
    rows = []
    for metric, curves in next_curves.items():
        x = _arr(curves, f"{metric} next-token curves", 2)
        L = x.shape[1] - 1
        est = stats.halfway_estimate(x, metric=metric, n_layers=L, frac=frac, n_boot=n_boot, seed=seed + 1,
                                     level=level, start=start)
        mean = x.mean(0)
        rises = DEPTH_METRICS[metric] * (mean[-1] - mean[start]) > 0
        rel, (rlo, rhi) = est.relative, est.relative_ci
        moves = {}
        for setting, alt in (preprocessing or {}).items():
            if metric not in alt:
                continue
            y = _arr(alt[metric], f"{setting} {metric} curves", 2)
            if y.shape[1] != L + 1 or y.shape[0] > x.shape[0]:
                raise ValueError(f"{setting}: expected [k <= {x.shape[0]}, {L + 1}] curves of the first k windows, "
                                 f"got {y.shape}")
            sh = stats.paired_halfway_shift(x[:y.shape[0]], y, n_layers=L, start=start, n_boot=n_boot,
                                            seed=seed + 2, level=level)
            moves[setting] = {"shift": sh["relative"], "lo": sh["relative_lo"], "hi": sh["relative_hi"],
                              "windows": int(y.shape[0])}
        half = None if rlo is None or rhi is None else (rhi - rlo) / 2
        moved = {k: v for k, v in moves.items() if v["shift"] is not None and half is not None
                 and abs(v["shift"]) > half}
        why = ""
        if not rises:
            v, why = INCONCLUSIVE, "the curve does not rise towards the next token"
        elif est.frac_never > (1 - level) / 2 or rlo is None:
            v, why = INCONCLUSIVE, f"the curve is flat in {est.frac_never:.0%} of the resamples"
        else:
            v = band_verdict(rlo, rhi, band)
            if v == INCONCLUSIVE:
                edge = lo_b if rlo < lo_b <= rhi else hi_b
                why = threshold_why(rlo, rhi, edge, "band edge")
            if moved:
                k_, m_ = next(iter(moved.items()))
                v, why = INCONCLUSIVE, (f"preprocessing moves it: {k_} shifts the depth by {m_['shift']:+.3g}, more "
                                        f"than the interval's half-width {half:.3g}")
        rule = C1_DEPTH_RULE.format(metrics=", ".join(DEPTH_METRICS), frac=frac, start=start, level=level,
                                    band_lo=lo_b, band_hi=hi_b, tail=f"{(1 - level) / 2:g}", primary=primary)
        cid = "C1.depth" if metric == primary else "C1.depth.sensitivity"
        rows.append(_row(cid, model=model, variant=decoder, verdict=v, why=why,
                         statistic=f"next-token emergence depth l/L ({metric})", estimate=rel, lo=rlo,
                         hi=rhi, level=level, n=x.shape[0], rule=rule, source=source,
                         details={"metric": metric, "primary": metric == primary, "post_hoc": True,
                                  "layer": est.crossing, "layer_lo": est.lo,
                                  "layer_hi": est.hi, "n_layers": L, "band": list(band),
                                  "frac_flat": est.frac_never, "curve_rises": bool(rises),
                                  "preprocessing": moves or None,
                                  "reference": "Gemma-2-2B, ~layer 17 of 26 (paper, project page)"}))
    return rows


# --------------------------------------------------------------------------------------------
# C2 on frozen models: the attenuation sweep
# --------------------------------------------------------------------------------------------


def _sweep_arrays(dloss, layers, alphas) -> tuple[np.ndarray, list[int], list[float]]:
    d = _arr(dloss, "dloss", 3)
    layers, alphas = [int(l) for l in layers], [float(a) for a in alphas]
    if d.shape[:2] != (len(layers), len(alphas)):
        raise ValueError(f"dloss is {d.shape}, expected [{len(layers)} layers, {len(alphas)} alphas, windows]")
    return d, layers, alphas


def _holm_family(diffs: Sequence[np.ndarray], *, alpha: float, margin: float, power: float,
                 n_boot: int, seed: int, level: float) -> tuple[str, list[dict[str, Any]], int, str]:
    """One-sided paired t-tests (H1: mean < 0) of each candidate, Holm across them.

    Returns (verdict, per-candidate numbers, index of the headline candidate, why). Reproduced if
    Holm rejects at least one candidate whose mean improvement is material (at least ``margin``);
    not reproduced if every candidate's CI lower bound is above -margin; inconclusive otherwise.
    """
    k = len(diffs)
    out = []
    for d in diffs:
        t = stats.paired_ttest(d, alternative="less")
        m, lo, hi = stats.bootstrap_mean(d, n_boot=n_boot, seed=seed, level=level)
        out.append({"mean": m, "lo": lo, "hi": hi, "t": t["t"], "p": t["p"], "sd": t["sd"], "n": t["n"],
                    "mde": stats.mde_paired_mean(t["sd"], t["n"], alpha=alpha / k, power=power, sided="one")})
    adj = stats.holm([c["p"] for c in out])
    for c, a in zip(out, adj):
        c["p_holm"] = float(a)
        c["rejected"] = bool(a <= alpha)
    rejected = [i for i, c in enumerate(out) if c["rejected"]]
    material = [i for i in rejected if out[i]["mean"] <= -margin]
    why = ""
    if material:
        verdict = REPRODUCED
        head = min(material, key=lambda i: out[i]["mean"])
    elif all(c["lo"] > -margin for c in out):
        verdict = NOT_REPRODUCED
        head = min(range(k), key=lambda i: out[i]["mean"])
    else:
        verdict = INCONCLUSIVE
        head = min(rejected or range(k), key=lambda i: out[i]["mean"])
        h = out[head]
        why = (f"significant but not material: Holm rejects, the improvement {-h['mean']:.3g} is below the "
               f"{margin:g} margin" if rejected else
               f"no candidate is significant after Holm, and an improvement of {margin:g} is not ruled out")
        if h["mde"] > margin:
            why += f"; underpowered: MDE {h['mde']:.3g} > margin {margin:g}"
    return verdict, out, head, why


C2_LATE_CUT_RULE = (
    "C2.late-cut (frozen model). Candidates: every swept (block l, alpha < 1) with l >= "
    "{late_fraction:.3g} L. Selection on one set of windows: the up to {max_candidates} cells with "
    "the lowest mean dloss among those below 0 (if none is below 0, the single lowest). "
    "Confirmation on a disjoint set of windows: per candidate a one-sided paired t-test of dloss "
    "(H1: mean < 0), Holm correction across the candidates at family level {alpha}. Reproduced if "
    "Holm rejects for at least one candidate whose mean improvement is material (at least {margin} "
    "nats); not reproduced if every candidate's two-sided {level} bootstrap CI on the confirmation windows lies above -{margin} "
    "nats (an improvement of {margin} nats or more is ruled out; the paper's only published "
    "difference, WikiText perplexity 28.46 vs 28.62, is 0.0056 nats); inconclusive otherwise. "
    "Reported: the minimum detectable effect in nats at the confirmation set's n, "
    "(t_(1-{alpha}/k) + t_{power}) SD/sqrt(n) with k candidates and n - 1 degrees of freedom.")


def late_cut_candidates(dloss, layers: Sequence[int], alphas: Sequence[float], *, n_layers: int,
                        select=None, late_fraction: float = LATE_FRACTION,
                        max_candidates: int = MAX_LATE_CANDIDATES) -> list[dict[str, Any]]:
    """The selection step of :func:`c2_late_cut`: which late cells go on to be confirmed.

    Among the swept cells (block ``l >= late_fraction * n_layers``, alpha < 1), the up to
    ``max_candidates`` with the lowest mean dloss over the ``select`` windows among those below 0
    (if none is below 0, the single lowest). ``select=None``: every window of ``dloss``. Returns
    ``[{"layer", "alpha", "selection_mean", "late_cells"}]`` (``late_cells``: how many late cells
    competed), best first: sweep these cells on the confirmation windows
    (``c2_late_cut(..., confirm_dloss=...)``).
    """
    d, layers, alphas = _sweep_arrays(dloss, layers, alphas)
    sel = np.arange(d.shape[2]) if select is None else np.asarray(select, dtype=np.int64)
    cells = [(li, ai) for li, l in enumerate(layers) if is_late(l, n_layers, late_fraction)
             for ai, a in enumerate(alphas) if a < 1]
    if not cells:
        raise ValueError(f"no swept block l >= {late_fraction:.3g} x {n_layers} with alpha < 1: sweep the "
                         "late blocks with some alpha < 1")
    sel_mean = {c: float(d[c[0], c[1], sel].mean()) for c in cells}
    ranked = sorted(cells, key=lambda c: sel_mean[c])
    chosen = [c for c in ranked if sel_mean[c] < 0][:max_candidates] or ranked[:1]
    return [{"layer": layers[li], "alpha": alphas[ai], "selection_mean": sel_mean[(li, ai)],
             "late_cells": len(cells)} for li, ai in chosen]


@_rule(C2_LATE_CUT_RULE)
def c2_late_cut(dloss, layers: Sequence[int], alphas: Sequence[float], *, n_layers: int, model: str,
                select=None, confirm=None, confirm_dloss=None, late_fraction: float = LATE_FRACTION,
                max_candidates: int = MAX_LATE_CANDIDATES, alpha: float = TEST_ALPHA, margin: float = LOSS_MARGIN, power: float = POWER,
                n_boot: int = 1000, seed: int = 0, level: float = LEVEL, source: str = "") -> list[VerdictRow]:
    """Does a late single-block cut lower the loss of a frozen model? Selection / confirmation.

    ``dloss [n_layers_swept, n_alphas, n_windows]`` (the sweep's ``result["dloss"]``), ``layers``
    and ``alphas`` its axes, ``n_layers`` the model's depth L. ``select``/``confirm``: disjoint
    window indices (default: :func:`residshift.analysis.stats.split_units` halves, seeded).

    ``confirm_dloss``: confirmation on OTHER windows than ``dloss``'s (e.g. further windows of the
    same seed, which are disjoint from the first ones): ``{(layer, alpha): [n_confirm]}`` holding at
    least every candidate :func:`late_cut_candidates` picks; then every window of ``dloss`` selects
    (leave ``select``/``confirm`` None). Cheaper than sweeping every late cell on every window:
    only the chosen cells need the confirmation windows.
    """
    d, layers, alphas = _sweep_arrays(dloss, layers, alphas)
    n = d.shape[2]
    if confirm_dloss is not None:
        if select is not None or confirm is not None:
            raise ValueError("with confirm_dloss every window of dloss selects: leave select and confirm None")
        select = np.arange(n)
        if n < 2:
            raise ValueError(f"selection needs >= 2 windows of dloss, got {n}")
    elif select is None and confirm is None:
        select, confirm = stats.split_units(n, seed=seed)
    elif select is None or confirm is None:
        raise ValueError("give both select and confirm window indices, or neither (a seeded half split)")
    select = np.asarray(select, dtype=np.int64)
    if confirm_dloss is None:
        confirm = np.asarray(confirm, dtype=np.int64)
        if set(select.tolist()) & set(confirm.tolist()):
            raise ValueError("the selection and confirmation windows overlap: they must be disjoint")
        if min(len(select), len(confirm)) < 2 or max(select.max(), confirm.max()) >= n or min(select.min(), confirm.min()) < 0:
            raise ValueError(f"select and confirm need >= 2 window indices each, within 0..{n - 1}")
    picked = late_cut_candidates(d, layers, alphas, n_layers=n_layers, select=select,
                                 late_fraction=late_fraction, max_candidates=max_candidates)
    if confirm_dloss is None:
        diffs = [d[layers.index(c["layer"]), alphas.index(c["alpha"]), confirm] for c in picked]
    else:
        given = {(int(l), float(a)): v for (l, a), v in confirm_dloss.items()}
        missing = [(c["layer"], c["alpha"]) for c in picked if (c["layer"], c["alpha"]) not in given]
        if missing:
            raise ValueError(f"confirm_dloss lacks the chosen candidate(s) {missing} (block, alpha): sweep "
                             "them on the confirmation windows (late_cut_candidates names them)")
        diffs = [_arr(given[(c["layer"], c["alpha"])], f"confirm_dloss[{c['layer']}, {c['alpha']}]", 1)
                 for c in picked]
        if len({len(x) for x in diffs}) != 1 or len(diffs[0]) < 2:
            raise ValueError("every candidate needs the same >= 2 confirmation windows")
    n_confirm = len(diffs[0])
    verdict, numbers, head, why = _holm_family(diffs, alpha=alpha, margin=margin, power=power, n_boot=n_boot,
                                               seed=seed, level=level)
    for c, num in zip(picked, numbers):
        num.update(layer=c["layer"], alpha=c["alpha"], selection_mean=c["selection_mean"])
    h = numbers[head]
    rule = C2_LATE_CUT_RULE.format(late_fraction=late_fraction, max_candidates=max_candidates, alpha=alpha,
                                   level=level, margin=margin, power=power)
    return [_row("C2.late-cut", model=model, variant=f"block {h['layer']}, alpha={h['alpha']:g}",
                 verdict=verdict, why=why, statistic="mean dloss on the confirmation windows (nats)",
                 estimate=h["mean"], lo=h["lo"], hi=h["hi"], level=level, n=n_confirm, rule=rule,
                 source=source,
                 details={"candidates": numbers, "k": len(picked), "n_selection": len(select),
                          "n_confirmation": n_confirm, "mde": h["mde"], "mde_unit": "nats",
                          "margin": margin, "late_cells": picked[0]["late_cells"]})]


N_PERMUTATIONS = 2000  # C2.layer-sensitive: random within-window permutations of the block labels

C2_LAYER_RULE = (
    "C2.layer-sensitive (frozen model). Compared blocks: the late blocks l >= {late_fraction:.3g} L "
    "only (the last two swept blocks where fewer are late), fixed in advance (cutting an early block of a trained model mostly breaks it, which says "
    "nothing about where attenuation should go). At alpha = {probe_alpha}, per window the loss change "
    "of each compared block. Test of 'the block does not matter': a permutation test (within each "
    "window the blocks' values are exchangeable under that hypothesis) of the spread max - min of the "
    "block means, {n_perm} random within-window permutations, p = (1 + #permuted spreads >= observed) "
    "/ (1 + {n_perm}); the spread itself is biased upward with no effect, so it is only the test "
    "statistic. Effect: the contrast between the most and the least harmful block, with a two-sided "
    "t-interval over windows at the Bonferroni level 1 - (1 - {level})/P for the P pairs of blocks. "
    "Reproduced if the permutation test rejects at {alpha} AND that contrast's interval excludes 0 "
    "with an estimate of at least {threshold} nats (material: a 10% perplexity difference between "
    "choices of block, about 17x the paper's published 0.0056-nat difference); not reproduced if every "
    "pair's Bonferroni interval lies within +-{threshold} nats; inconclusive otherwise, with the reason.")


def permutation_spread(x, *, n_perm: int = N_PERMUTATIONS, seed: int = 0) -> dict[str, Any]:
    """Permutation test of 'no difference between the rows of ``x [k, n]``' (k conditions measured on
    the same n units): within each unit the k values are permuted at random; statistic: the spread
    max - min of the k means. Returns ``spread``, ``p`` (with the +1 correction) and ``n_perm``."""
    x = _arr(x, "x", 2)
    k, n = x.shape
    if k < 2 or n < 1:
        raise ValueError(f"a permutation test of the spread needs >= 2 conditions and >= 1 unit, got {x.shape}")
    obs = float(np.ptp(x.mean(axis=1)))
    rng = np.random.default_rng(seed)
    xt = x.T  # [n, k]
    count, done = 0, 0
    while done < n_perm:  # in chunks: memory stays flat in n_perm
        b = min(500, n_perm - done)
        perm = rng.random((b, n, k)).argsort(axis=2)
        means = np.take_along_axis(np.broadcast_to(xt, (b, n, k)), perm, axis=2).mean(axis=1)  # [b, k]
        count += int((np.ptp(means, axis=1) >= obs - 1e-12).sum())
        done += b
    return {"spread": obs, "p": (1 + count) / (1 + n_perm), "n_perm": n_perm}


@_rule(C2_LAYER_RULE.replace("{n_perm}", str(N_PERMUTATIONS)))
def c2_layer_sensitive(dloss, layers: Sequence[int], alphas: Sequence[float], *, model: str, n_layers: int,
                       probe_alpha: float = PROBE_ALPHA, threshold: float = SPREAD_THRESHOLD,
                       late_fraction: float = LATE_FRACTION, alpha: float = TEST_ALPHA,
                       n_perm: int = N_PERMUTATIONS, seed: int = 0, level: float = LEVEL,
                       source: str = "") -> list[VerdictRow]:
    """Is the effect of a single-block cut very sensitive to the block (frozen model)?

    ``dloss [n_layers_swept, n_alphas, n_windows]`` with its ``layers`` and ``alphas`` axes;
    ``n_layers`` the model's depth L (which blocks are late).
    """
    d, layers, alphas = _sweep_arrays(dloss, layers, alphas)
    if probe_alpha not in alphas:
        raise ValueError(f"alpha {probe_alpha} was not swept (swept: {alphas}): pick one of them")
    if len(layers) < 2:
        raise ValueError("layer sensitivity needs at least 2 swept blocks")
    late = [i for i, l in enumerate(layers) if is_late(l, n_layers, late_fraction)]
    if len(late) < 2:  # a shallow model: its last two swept blocks
        late = sorted(range(len(layers)), key=lambda i: layers[i])[-2:]
    x = d[late, alphas.index(probe_alpha)]  # [k, n]
    blocks = [layers[i] for i in late]
    k, n = x.shape
    if n < 2:
        raise ValueError(f"layer sensitivity needs >= 2 windows, got {n}")
    perm = permutation_spread(x, n_perm=n_perm, seed=seed)
    means = x.mean(axis=1)
    hi_i, lo_i = int(means.argmax()), int(means.argmin())
    pairs = [(i, j) for i in range(k) for j in range(i + 1, k)]
    level_b = bonferroni_level(level, len(pairs))
    q = float(_sp_t.ppf((1 + level_b) / 2, n - 1))

    def interval(i, j):
        t = stats.paired_ttest(x[i] - x[j])
        return t["mean"], t["mean"] - q * t["se"], t["mean"] + q * t["se"]

    est, lo, hi = interval(hi_i, lo_i)
    within = all(-threshold < a and b < threshold for _, a, b in (interval(i, j) for i, j in pairs))
    if perm["p"] <= alpha and lo > 0 and est >= threshold:
        verdict, why = REPRODUCED, ""
    elif within:
        verdict, why = NOT_REPRODUCED, ""
    else:
        verdict = INCONCLUSIVE
        why = (f"the blocks differ (permutation p = {perm['p']:.3g}) but the largest contrast {est:.3g} is below "
               f"the {threshold:g} threshold" if perm["p"] <= alpha and lo > 0 else
               f"some pair's interval reaches past +-{threshold:g} but the difference is not established "
               f"(permutation p = {perm['p']:.3g})")
    rule = C2_LAYER_RULE.format(late_fraction=late_fraction, probe_alpha=probe_alpha, n_perm=n_perm, level=level,
                                alpha=alpha, threshold=threshold)
    return [_row("C2.layer-sensitive", model=model, variant=f"late blocks, alpha={probe_alpha:g}", verdict=verdict,
                 why=why, statistic=f"largest late-block contrast of the loss change at alpha={probe_alpha:g} "
                                    f"(block {blocks[hi_i]} - block {blocks[lo_i]}, nats)",
                 estimate=est, lo=lo, hi=hi, level=level_b, n=n, rule=rule, source=source,
                 details={"compared_blocks": blocks, "permutation_p": perm["p"], "spread": perm["spread"],
                          "n_perm": n_perm, "most_harmful_block": blocks[hi_i], "least_harmful_block": blocks[lo_i],
                          "block_means": dict(zip(map(str, blocks), means.tolist())),
                          "bonferroni_level": level_b, "threshold": threshold})]


def alpha0_summary(dloss, layers: Sequence[int], alphas: Sequence[float], *, n_boot: int = 1000,
                   seed: int = 0, level: float = LEVEL) -> list[dict[str, Any]]:
    """Cutting one block's skip path of a TRAINED model: a description, not a verdict.

    Per swept block, the mean loss change at alpha = 0 with a bootstrap CI over windows. This says
    how much a trained model relies on each skip path; it is not evidence for C2, whose claim is
    about training with the cut in place (the training notebooks test that:
    :func:`c2_training_alpha0`).
    """
    d, layers, alphas = _sweep_arrays(dloss, layers, alphas)
    if 0.0 not in alphas:
        raise ValueError(f"alpha = 0 was not swept (swept: {alphas})")
    a0 = alphas.index(0.0)
    out = []
    for li, layer in enumerate(layers):
        m, lo, hi = stats.bootstrap_mean(d[li, a0], n_boot=n_boot, seed=seed, level=level)
        out.append({"layer": layer, "alpha": 0.0, "dloss": m, "lo": lo, "hi": hi, "level": level,
                    "n": int(d.shape[2])})
    return out


def best_fixed_cut(dloss, layers: Sequence[int], alphas: Sequence[float], *,
                   late_fraction: float | None = None, n_layers: int | None = None) -> dict[str, Any]:
    """The fixed single-block cut with the lowest mean dloss, the unmodified model among the candidates.

    Every swept (block, alpha) is a candidate, and so is alpha = 1 (the unmodified model, dloss 0
    by definition, whether or not it was swept); ties go to the unmodified model. With
    ``late_fraction`` only blocks ``l >= late_fraction * n_layers`` compete. Choose it on other
    windows than the ones the comparison uses (the sweep's validation windows vs test windows).
    Returns ``{"layer": l or None, "alpha", "dloss", "label"}``.
    """
    d, layers, alphas = _sweep_arrays(dloss, layers, alphas)
    if late_fraction is not None and n_layers is None:
        raise ValueError("late_fraction needs n_layers (the model's depth)")
    best = {"layer": None, "alpha": 1.0, "dloss": 0.0, "label": "unmodified (alpha = 1)"}
    for li, l in enumerate(layers):
        if late_fraction is not None and not is_late(l, n_layers, late_fraction):
            continue
        for ai, a in enumerate(alphas):
            m = float(d[li, ai].mean())
            if a < 1 and m < best["dloss"]:
                best = {"layer": l, "alpha": a, "dloss": m, "label": f"block {l}, alpha={a:g}"}
    return best


# --------------------------------------------------------------------------------------------
# C3 (and its training counterparts): gates vs references, concentration, misalignment
# --------------------------------------------------------------------------------------------


VS_RULE = (
    "{claim_id}. Per seed, the paired difference {what} per {units}; statistic: its mean with a "
    "two-sided {level} percentile bootstrap CI over {units}. Per-seed verdict by the improvement "
    "rule: reproduced if the CI lies below 0 and the mean is an improvement of at least {margin} "
    "nats (material); not reproduced if the CI lies above -{margin} nats (an improvement of "
    "{margin} nats or more is ruled out); inconclusive otherwise, and inconclusive "
    "('did not converge') for a fit that stopped at its step cap rather than by held-out early "
    "stopping. Seeds combined by {how} (unanimous: reproduced / not reproduced only if every seed "
    "says so). The row's estimate and CI are those of the seed-averaged difference.")


def _stopped_at_cap(flag) -> bool:
    """A fit record's ``stopped_early`` is False: it ran into its step cap (None: not applicable)."""
    return flag is not None and not bool(flag)


def _paired_by_seed(x: np.ndarray, ref: np.ndarray, *, sign: int, margin: float, converged, n_boot: int,
                    seed: int, level: float) -> tuple[list[str], list[dict[str, Any]]]:
    verdicts, numbers = [], []
    for s in range(x.shape[0]):
        m, lo, hi = stats.bootstrap_mean(x[s] - ref[s], n_boot=n_boot, seed=seed, level=level)
        v, why = improvement_outcome(lo, hi, sign=sign, margin=margin, estimate=m)
        if _stopped_at_cap(converged[s]):
            v, why = INCONCLUSIVE, "did not converge: the fit stopped at its step cap"
        verdicts.append(v)
        numbers.append({"mean": m, "lo": lo, "hi": hi, "converged": converged[s], "why": why})
    return verdicts, numbers


def _seeds_why(verdict: str, per_seed: Sequence[str], numbers: Sequence[Mapping[str, Any]]) -> str:
    """Why a row combined from per-seed verdicts is inconclusive: the seeds disagree, or each seed's reason."""
    if verdict != INCONCLUSIVE:
        return ""
    if len(set(per_seed)) > 1:
        counts = ", ".join(f"{per_seed.count(v)} {v}" for v in OUTCOMES if v in per_seed)
        return f"seeds disagree ({counts})"
    reasons = sorted({c.get("why") or "" for c in numbers} - {""})
    return "; ".join(reasons) if reasons else "every seed is inconclusive"


def _gates_vs(gated, reference, *, claim_id: str, what: str, model: str, variant: str | None, converged,
              steps, margin: float, how: str, n_boot: int, seed: int, level: float, source: str,
              extra: dict | None = None) -> VerdictRow:
    g = _per_seed(gated, "gated losses")
    ref = _broadcast_seeds(_per_seed(reference, "reference losses", g.shape[1]), g.shape[0], "reference losses")
    conv = _seed_flags(converged, g.shape[0], "converged", None)
    st = _seed_flags(steps, g.shape[0], "steps", None)
    per_seed, numbers = _paired_by_seed(g, ref, sign=-1, margin=margin, converged=conv, n_boot=n_boot,
                                        seed=seed, level=level)
    for c, s in zip(numbers, st):
        c["steps"] = s
    m, lo, hi = stats.bootstrap_mean((g - ref).mean(axis=0), n_boot=n_boot, seed=seed, level=level)
    rule = VS_RULE.format(claim_id=claim_id, what=what, units="window", level=level, margin=margin, how=how)
    verdict = stats.combine_verdicts(per_seed, how=how)
    return _row(claim_id, model=model, variant=variant, verdict=verdict, why=_seeds_why(verdict, per_seed, numbers),
                statistic=f"mean loss change, {what} (nats, seed-averaged)", estimate=m, lo=lo, hi=hi,
                level=level, n=g.shape[1], rule=rule, per_seed=per_seed, source=source,
                details={"per_seed": numbers, "margin": margin, "combine": how,
                         "not_converged": [i for i, c in enumerate(conv) if _stopped_at_cap(c)],
                         **(extra or {})})


@_rule(VS_RULE.replace("{claim_id}", "C3.beats-baseline").replace("{what}", "gated - unmodified")
       .replace("{units}", "window"))
def c3_beats_baseline(gated, unmodified, *, model: str, variant: str | None, converged=None, steps=None,
                      margin: float = LOSS_MARGIN, how: str = "unanimous", setting: str = "frozen",
                      n_boot: int = 1000, seed: int = 0, level: float = LEVEL, source: str = "") -> list[VerdictRow]:
    """Gates vs the unmodified (frozen) or baseline (trained) model, paired over windows per seed.

    ``gated [n_seeds, n_windows]`` per-window mean losses with each seed's gates; ``unmodified``
    ``[n_windows]`` (frozen: one model) or ``[n_seeds, n_windows]`` (training: a baseline per seed).
    ``converged``: per seed, the fit record's ``stopped_early`` (False = stopped at the step cap: that
    seed is inconclusive); None for runs without early stopping (training to a token budget).
    ``steps``: per seed, the fit's step count (reported). ``setting="training"`` gives claim id
    ``C3-training.beats-baseline``.
    """
    cid = _setting_prefix("C3.beats-baseline", setting)
    return [_gates_vs(gated, unmodified, claim_id=cid, what="gated - unmodified", model=model, variant=variant,
                      converged=converged, steps=steps, margin=margin, how=how, n_boot=n_boot, seed=seed,
                      level=level, source=source)]


@_rule(VS_RULE.replace("{claim_id}", "C3.beats-best-cut").replace("{what}", "gated - best fixed cut")
       .replace("{units}", "window"))
def c3_beats_best_cut(gated, best_cut, *, cut: Mapping[str, Any], model: str, variant: str | None,
                      converged=None, steps=None, margin: float = LOSS_MARGIN, how: str = "unanimous",
                      setting: str = "frozen", n_boot: int = 1000, seed: int = 0, level: float = LEVEL,
                      source: str = "") -> list[VerdictRow]:
    """Gates vs the best fixed single-block cut, where alpha = 1 (the unmodified model) competes.

    ``best_cut``: per-window losses of the cut chosen by :func:`best_fixed_cut` on OTHER windows
    (the unmodified model's losses when alpha = 1 won); ``cut``: that function's result (reported).
    Shapes and ``converged``/``steps`` as in :func:`c3_beats_baseline`.
    """
    cid = _setting_prefix("C3.beats-best-cut", setting)
    return [_gates_vs(gated, best_cut, claim_id=cid, what="gated - best fixed cut", model=model,
                      variant=variant, converged=converged, steps=steps, margin=margin, how=how,
                      n_boot=n_boot, seed=seed, level=level, source=source, extra={"cut": dict(cut)})]


C3_CONCENTRATION_RULE = (
    "{claim_id}. Two rows, one per part of the claim. Attenuation of block l is 1 - alpha_l (token "
    "gates: the mean alpha over tokens). Relative part ({claim_id}): per seed, reproduced if the "
    "final block's attenuation is at least {ratio} times every other block's (and above 0); not "
    "reproduced if some other block is attenuated at least as much; inconclusive otherwise (the final "
    "block leads by less than {ratio}x). Material part ({claim_id}.material): per seed, reproduced "
    "if the final block's attenuation is at least {min_attenuation} (it removes a material share of "
    "the skip path), not reproduced if below. Either part is inconclusive ('did not converge') for a "
    "fit that stopped at its step cap. Seeds combined by {how}. No interval: one fitted value per "
    "seed; each row's estimate is averaged over seeds (the final block's attenuation, or its ratio to "
    "the largest other block's).")
C3_MOVEMENT_CLAUSE = (
    " A seed whose gates all ended within {min_movement} of their starting alpha is inconclusive "
    "('did not move'): where they ended says where they started, not what training asked for.")


@_rule(C3_CONCENTRATION_RULE.replace("{claim_id}", "C3.concentrates"))
def c3_concentration(alphas_by_seed, layers: Sequence[int], n_layers: int, *, model: str,
                     variant: str | None, converged=None, steps=None, min_attenuation: float = MIN_ATTENUATION,
                     ratio: float = CONCENTRATION_RATIO, how: str = "unanimous", setting: str = "frozen",
                     start_alphas=None, min_movement: float = MIN_GATE_MOVEMENT,
                     source: str = "") -> list[VerdictRow]:
    """Does the learned attenuation concentrate on the final block? Two rows: the relative claim
    (``C3.concentrates``: final >= ``ratio`` x every other) and the material one
    (``C3.concentrates.material``: final >= ``min_attenuation``).

    ``alphas_by_seed [n_seeds, n_gated]``: each seed's fitted alpha per gated block (``layers``);
    ``converged``/``steps`` as in :func:`c3_beats_baseline`. ``start_alphas`` (``[n_gated]`` or
    ``[n_seeds, n_gated]``): where the gates started; given, a seed whose gates all moved less than
    ``min_movement`` is inconclusive ("did not move") and the rule says so.
    """
    cid = _setting_prefix("C3.concentrates", setting)
    a = _per_seed(alphas_by_seed, "alphas_by_seed")
    layers = [int(l) for l in layers]
    if a.shape[1] != len(layers):
        raise ValueError(f"alphas_by_seed has {a.shape[1]} gates per seed but {len(layers)} layers")
    if n_layers - 1 not in layers:
        raise ValueError(f"the final block ({n_layers - 1}) was not gated: gate it to judge concentration")
    conv = _seed_flags(converged, a.shape[0], "converged", None)
    st = _seed_flags(steps, a.shape[0], "steps", None)
    last = layers.index(n_layers - 1)
    start = None if start_alphas is None else _broadcast_seeds(_per_seed(start_alphas, "start_alphas", len(layers)),
                                                                a.shape[0], "start_alphas")
    rel_seed, mat_seed, numbers = [], [], []
    for s in range(a.shape[0]):
        att = 1 - a[s]
        final = float(att[last])
        others = [(float(att[i]), layers[i]) for i in range(len(layers)) if i != last]
        top_other, runner = max(others) if others else (None, None)
        why = ""
        if top_other is not None and top_other >= final:
            rel = NOT_REPRODUCED
        elif final > 0 and (top_other is None or final >= ratio * max(top_other, 0.0)):
            rel = REPRODUCED
        elif final <= 0:
            rel = NOT_REPRODUCED
        else:
            rel, why = INCONCLUSIVE, f"the final block leads by less than {ratio:g}x"
        mat = REPRODUCED if final >= min_attenuation else NOT_REPRODUCED
        moved = None if start is None else float(np.abs(a[s] - start[s]).max())
        if _stopped_at_cap(conv[s]):
            why = "did not converge: the fit stopped at its step cap"
        elif moved is not None and moved < min_movement:
            why = f"did not move: every gate ended within {min_movement:g} of its start"
        if why and not why.startswith("the final"):
            rel, mat = INCONCLUSIVE, INCONCLUSIVE
        rel_seed.append(rel)
        mat_seed.append(mat)
        numbers.append({"final_attenuation": final, "final_alpha": float(a[s, last]),
                        "runner_up_block": runner, "runner_up_attenuation": top_other,
                        "ratio": (final / top_other) if top_other and top_other > 0 else None,
                        "most_attenuated_block": layers[int(att.argmax())], "converged": conv[s],
                        "steps": st[s], "why": why})
        if moved is not None:
            numbers[-1].update(largest_movement=moved, did_not_move=moved < min_movement)
    rule = C3_CONCENTRATION_RULE.format(claim_id=cid, min_attenuation=min_attenuation, ratio=ratio, how=how)
    if start is not None:
        rule += C3_MOVEMENT_CLAUSE.format(min_movement=min_movement)
    details = {"per_seed": numbers, "min_attenuation": min_attenuation, "ratio": ratio, "combine": how}
    ratios = [c["ratio"] for c in numbers if c["ratio"] is not None]
    v_rel, v_mat = stats.combine_verdicts(rel_seed, how=how), stats.combine_verdicts(mat_seed, how=how)
    mat_numbers = [{**c, "why": c["why"] if c["why"] and not c["why"].startswith("the final") else ""}
                   for c in numbers]
    return [_row(cid, model=model, variant=variant, verdict=v_rel, why=_seeds_why(v_rel, rel_seed, numbers),
                 statistic="final-block attenuation / largest other block's (mean over seeds)",
                 estimate=float(np.mean(ratios)) if ratios else None, lo=None, hi=None,
                 level=None, n=a.shape[0], rule=rule, per_seed=rel_seed, source=source, details=details),
            _row(cid + ".material", model=model, variant=variant, verdict=v_mat,
                 why=_seeds_why(v_mat, mat_seed, mat_numbers),
                 statistic="final-block attenuation 1 - alpha_L (mean over seeds)",
                 estimate=float(np.mean([c["final_attenuation"] for c in numbers])), lo=None, hi=None,
                 level=None, n=a.shape[0], rule=rule, per_seed=mat_seed, source=source, details=details)]


C3_MISALIGNMENT_RULE = (
    "C3.misalignment (primary). The input token's alignment measured directly: per window, the mean "
    "over the states after the edited block ({after}) of the lens log-probability of the input "
    "token x_t, with the gates minus without (same windows). Statistic: its mean, two-sided {level} "
    "percentile bootstrap CI over windows. Improvement rule (claimed sign: negative, the input token "
    "is less decodable): reproduced if the CI lies below 0 and the mean is at least "
    "{margin_logprob} nats below 0 (material); not reproduced if it lies above "
    "-{margin_logprob} nats; inconclusive otherwise. The loss change is reported beside it "
    "(details), not inside it.")
C3_MISALIGNMENT_RANK_RULE = (
    "C3.misalignment.rank (secondary). As C3.misalignment with the input token's log10 rank "
    "(claimed sign: positive, it ranks lower): reproduced if the CI lies above 0 and the mean is at "
    "least {margin_logrank} (material); not reproduced if "
    "it lies below {margin_logrank}; inconclusive otherwise.")
C3_EMERGENCE_RULE = (
    "C3.emergence-shift (secondary). The next-token emergence depth ({metric}: where the mean "
    "next-token curve has covered half its way from h_{start} to h_L), with the gates minus without, "
    "as relative depth, bootstrapped over the same windows for both (two-sided {level} percentile "
    "CI). Claimed sign negative (earlier): reproduced if the CI lies below 0 and the mean is at least "
    "{margin_depth} earlier (material); not reproduced if it "
    "lies above -{margin_depth}; inconclusive otherwise, or when either curve is flat in more than "
    "(1 - {level})/2 of the resamples. Three separate claim ids, no correction across them: the "
    "primary one carries 'the gates reduce the misalignment'.")


@_rule(C3_MISALIGNMENT_RULE.replace("{after}", "after_layers"), C3_MISALIGNMENT_RANK_RULE,
       C3_EMERGENCE_RULE.replace("{metric}", "emergence_metric"))
def c3_misalignment(before: Mapping[str, Any], after: Mapping[str, Any], *, after_layers: Sequence[int],
                    model: str, variant: str | None, loss_before=None, loss_after=None,
                    emergence_metric: str = "top1", start: int = 1, margin_logprob: float = MISALIGNMENT_MARGINS["logprob"],
                    margin_logrank: float = MISALIGNMENT_MARGINS["logrank"], margin_depth: float = MISALIGNMENT_MARGINS["depth"], n_boot: int = 1000,
                    seed: int = 0, level: float = LEVEL, source: str = "") -> list[VerdictRow]:
    """Misalignment measured directly, before vs after an edit, paired per window.

    ``before``/``after``: lens per-window curves ``[n_windows, L+1]`` of the same windows without and
    with the edit, with keys ``logprob_input``, ``logrank_input`` and ``<emergence_metric>_next``
    (``LensResult.per_seq``). ``after_layers``: the residual states after the edited block (e.g.
    ``range(b + 1, L + 1)`` for block ``b``). ``loss_before``/``loss_after``: optional per-window
    losses, reported beside the rows.
    """
    if emergence_metric not in DEPTH_METRICS:
        raise ValueError(f"emergence_metric must be one of {list(DEPTH_METRICS)}, got {emergence_metric!r}")
    need = ["logprob_input", "logrank_input", f"{emergence_metric}_next"]
    for name, dct in (("before", before), ("after", after)):
        missing = [k for k in need if k not in dct]
        if missing:
            raise ValueError(f"{name} lacks {missing}: run the lens with metrics logprob, logrank and "
                             f"{emergence_metric}")
    b = {k: _arr(before[k], f"before[{k}]", 2) for k in need}
    a = {k: _arr(after[k], f"after[{k}]", 2) for k in need}
    shape = b[need[0]].shape
    if any(x.shape != shape for x in (*b.values(), *a.values())):
        raise ValueError("before and after curves must all be [n_windows, L+1] of the same windows")
    n, L = shape[0], shape[1] - 1
    idx = [int(l) for l in after_layers]
    if not idx or min(idx) < 1 or max(idx) > L:
        raise ValueError(f"after_layers must be residual states within 1..{L} (after the edited block)")
    details: dict[str, Any] = {"after_layers": idx}
    if loss_before is not None and loss_after is not None:
        details["loss_change"] = stats.paired_delta(_arr(loss_after, "loss_after", 1),
                                                    _arr(loss_before, "loss_before", 1), n_boot=n_boot,
                                                    seed=seed, level=level)
    who = dict(model=model, variant=variant, source=source)
    p = dict(after=f"h_{idx[0]}..h_{idx[-1]}" if idx == list(range(idx[0], idx[-1] + 1)) else str(idx),
             level=level, margin_logprob=margin_logprob, margin_logrank=margin_logrank,
             margin_depth=margin_depth, metric=emergence_metric, start=start)
    rows = []
    for key, cid, sign, margin, stat_name, template in (
            ("logprob_input", "C3.misalignment", -1, margin_logprob,
             "input-token lens log-prob after the edited block, with - without (nats)", C3_MISALIGNMENT_RULE),
            ("logrank_input", "C3.misalignment.rank", 1, margin_logrank,
             "input-token log10 rank after the edited block, with - without", C3_MISALIGNMENT_RANK_RULE)):
        d = a[key][:, idx].mean(1) - b[key][:, idx].mean(1)
        m, lo, hi = stats.bootstrap_mean(d, n_boot=n_boot, seed=seed, level=level)
        v, why = improvement_outcome(lo, hi, sign=sign, margin=margin, estimate=m)
        rows.append(_row(cid, **who, verdict=v, why=why,
                         statistic=stat_name, estimate=m, lo=lo, hi=hi, level=level, n=n,
                         rule=template.format(**p),
                         details={**details, "before": float(b[key][:, idx].mean()),
                                  "after": float(a[key][:, idx].mean()), "margin": margin}))
    key = f"{emergence_metric}_next"
    sh = stats.paired_halfway_shift(b[key], a[key], n_layers=L, start=start, n_boot=n_boot, seed=seed,
                                    level=level)
    if sh["relative"] is None or sh["frac_undefined"] > (1 - level) / 2:
        v, why = INCONCLUSIVE, f"a curve is flat in {sh['frac_undefined']:.0%} of the resamples (no half-way depth)"
    else:
        v, why = improvement_outcome(sh["relative_lo"], sh["relative_hi"], sign=-1, margin=margin_depth,
                                     estimate=sh["relative"])
    rows.append(_row("C3.emergence-shift", **who, verdict=v, why=why,
                     statistic=f"next-token emergence depth l/L ({emergence_metric}), with - without",
                     estimate=sh["relative"], lo=sh["relative_lo"], hi=sh["relative_hi"], level=level, n=n,
                     rule=C3_EMERGENCE_RULE.format(**p),
                     details={**details, "shift_layers": sh["estimate"], "before_layer": sh["before"],
                              "after_layer": sh["after"], "frac_undefined": sh["frac_undefined"],
                              "margin": margin_depth}))
    return rows


# --------------------------------------------------------------------------------------------
# Benchmarks paired by item (C3 and C4)
# --------------------------------------------------------------------------------------------


BENCH_RULE = (
    "{claim_id}. Per seed and task, the same items scored before and after (0/1 correct). Test: exact "
    "one-sided McNemar test on the discordant items (H1: after is less accurate), Holm correction "
    "across the tasks at family level {alpha}. Minimum detectable drop per task: (z_(1-{alpha}/m) + "
    "z_{power}) sqrt(p_d/n), m tasks, p_d the one-sided {alpha} Clopper-Pearson upper bound of the "
    "share of items whose correctness changed (the observed share is noisy at small n). Per-seed "
    "verdict: not reproduced if Holm rejects for any task (significantly worse); reproduced if none "
    "is rejected and every task's detectable drop is at most the materiality margin {margin} "
    "accuracy (a drop that large would have been seen with {power} power); inconclusive otherwise "
    "(an underpowered 'match'). Seeds combined by {how}. Shown: the accuracy change of the worst "
    "task (seed-averaged) with a two-sided {level} paired bootstrap CI over its items.")


def _benchmarks(before: Mapping[str, Any], after: Mapping[str, Any], *, claim_id: str, model: str,
                variant: str | None, alpha: float, margin: float, power: float, how: str, n_boot: int,
                seed: int, level: float, source: str) -> VerdictRow:
    tasks = list(after)
    if not tasks or set(before) != set(after):
        raise ValueError(f"before and after must score the same tasks, got {sorted(before)} and {sorted(after)}")
    data = {}
    for t in tasks:
        y = _per_seed(after[t], f"after[{t}]")
        x = _broadcast_seeds(_per_seed(before[t], f"before[{t}]", y.shape[1]), y.shape[0], f"before[{t}]")
        data[t] = (x, y)
    n_seeds = {data[t][1].shape[0] for t in tasks}
    if len(n_seeds) != 1:
        raise ValueError(f"every task needs the same seeds, got {sorted(n_seeds)} seeds")
    S, m = n_seeds.pop(), len(tasks)
    per_seed, per_task = [], {t: [] for t in tasks}
    for s in range(S):
        tests = [stats.mcnemar_exact(data[t][0][s], data[t][1][s], alternative="worse") for t in tasks]
        adj = stats.holm([r["p"] for r in tests])
        mdes = []
        for t, r, pa in zip(tasks, tests, adj):
            pd_up = stats.discordance_upper(r["n_discordant"], r["n"], level=1 - alpha)
            mde = stats.mde_paired_accuracy(pd_up, r["n"], alpha=alpha / m, power=power, sided="one")
            mdes.append(mde)
            per_task[t].append({**r, "p_holm": float(pa), "discordance_upper": pd_up, "mde": mde})
        if any(pa <= alpha for pa in adj):
            per_seed.append(NOT_REPRODUCED)
        elif all(x <= margin for x in mdes):
            per_seed.append(REPRODUCED)
        else:
            per_seed.append(INCONCLUSIVE)
    diffs = {t: (data[t][1] - data[t][0]).mean(axis=0) for t in tasks}  # per item, seed-averaged
    worst = min(tasks, key=lambda t: diffs[t].mean())
    m_, lo, hi = stats.bootstrap_mean(diffs[worst], n_boot=n_boot, seed=seed, level=level)
    rule = BENCH_RULE.format(claim_id=claim_id, alpha=alpha, power=power, margin=margin, how=how, level=level)
    max_mde = max(c["mde"] for cs in per_task.values() for c in cs)
    verdict, why = stats.combine_verdicts(per_seed, how=how), ""
    reach = bench_reach({t: data[t][1].shape[1] for t in tasks}, alpha=alpha, power=power, margin=margin)
    if verdict == INCONCLUSIVE:
        why = (reach["why"] if not reach["reachable"] else
               "seeds disagree" if len(set(per_seed)) > 1 else
               f"underpowered: detectable drop up to {max_mde:.3f} > margin {margin:g}")
    return _row(claim_id, model=model, variant=variant, verdict=verdict,
                statistic=f"accuracy after - before, worst task ({worst}), seed-averaged",
                estimate=m_, lo=lo, hi=hi, level=level, n=len(diffs[worst]), rule=rule, per_seed=per_seed,
                source=source,
                details={"tasks": per_task, "mde": max_mde, "mde_unit": "accuracy", "margin": margin,
                         "combine": how, "worst_task": worst, "why": why, "reach": reach})


def bench_reach(items: Mapping[str, int], *, alpha: float = TEST_ALPHA, power: float = POWER,
                margin: float = BENCH_MARGIN) -> dict[str, Any]:
    """Can the benchmark rule say "reproduced" with these items per task? Only if even the best case
    -- no item changes its answer, so the changed-answer rate is at its Clopper-Pearson upper bound for
    0 of n -- gives a detectable drop within ``margin`` for every task. Returns ``reachable``, the
    best-case drop per task, the items per task that would reach the margin, and ``why``."""
    m = len(items)
    best = {t: stats.mde_paired_accuracy(stats.discordance_upper(0, n, level=1 - alpha), n, alpha=alpha / m,
                                         power=power, sided="one") for t, n in items.items()}
    n = 1
    while n < 10**7:  # smallest n whose best case reaches the margin (monotone in n)
        if stats.mde_paired_accuracy(stats.discordance_upper(0, n, level=1 - alpha), n, alpha=alpha / m,
                                     power=power, sided="one") <= margin:
            break
        n = int(n * 1.05) + 1
    ok = all(v <= margin for v in best.values())
    fewest = min(items.values())
    why = "" if ok else (f"not assessable at this profile: with {fewest} items per task even no changed answer "
                         f"leaves a detectable drop of {max(best.values()):.3f} > margin {margin:g}; at least "
                         f"~{n} items per task (more when answers change) would assess it")
    return {"reachable": ok, "best_case_drop": best, "items_needed_at_best": n, "why": why}


def benchmark_items_needed(row: VerdictRow, *, alpha: float = TEST_ALPHA, power: float = POWER) -> tuple[dict, int]:
    """For a benchmark row (:func:`c3_benchmarks` / :func:`c4_benchmarks`): the task and seed with the
    largest minimum detectable drop, and about how many items per task would bring that drop down to
    the rule's margin (McNemar at the Holm level across the row's tasks, the changed-answer rate held
    at its upper bound)."""
    tasks = row.details["tasks"]
    worst = max((c for cs in tasks.values() for c in cs), key=lambda c: c["mde"])
    need = stats.n_for_mde(row.details["margin"], float(np.sqrt(worst["discordance_upper"])),
                           alpha=alpha / len(tasks), power=power)
    return worst, need


@_rule(BENCH_RULE.replace("{claim_id}", "C3.benchmarks"))
def c3_benchmarks(before: Mapping[str, Any], after: Mapping[str, Any], *, model: str, variant: str | None,
                  alpha: float = TEST_ALPHA, margin: float = BENCH_MARGIN, power: float = POWER, how: str = "unanimous",
                  n_boot: int = 1000, seed: int = 0, level: float = LEVEL, source: str = "") -> list[VerdictRow]:
    """Gates on a frozen model: benchmarks before vs after, paired by item.

    ``before``: task -> ``[n_items]`` 0/1 correctness of the unmodified model; ``after``: task ->
    ``[n_items]`` or ``[n_seeds, n_items]`` with each seed's gates, the same items in the same order.
    """
    return [_benchmarks(before, after, claim_id="C3.benchmarks", model=model, variant=variant, alpha=alpha,
                        margin=margin, power=power, how=how, n_boot=n_boot, seed=seed, level=level,
                        source=source)]


@_rule(BENCH_RULE.replace("{claim_id}", "C4.benchmarks"))
def c4_benchmarks(before: Mapping[str, Any], after: Mapping[str, Any], *, model: str, variant: str | None,
                  alpha: float = TEST_ALPHA, margin: float = BENCH_MARGIN, power: float = POWER, how: str = "unanimous",
                  n_boot: int = 1000, seed: int = 0, level: float = LEVEL, source: str = "") -> list[VerdictRow]:
    """Trained models: the attenuated (or gated) model vs the baseline, paired per item and per seed.

    ``before``, ``after``: task -> ``[n_seeds, n_items]`` 0/1 correctness (seed s of the variant is
    paired with seed s of the baseline: same data order and initialisation), the same items.
    """
    return [_benchmarks(before, after, claim_id="C4.benchmarks", model=model, variant=variant, alpha=alpha,
                        margin=margin, power=power, how=how, n_boot=n_boot, seed=seed, level=level,
                        source=source)]


# --------------------------------------------------------------------------------------------
# Trained models (notebooks 06-08): the seed is the unit
# --------------------------------------------------------------------------------------------
# Each seed trains every variant from the same initialisation and data order, so one seed gives one
# paired difference d_s (variant - baseline, averaged over the evaluation windows); the windows
# within a seed only measure d_s more precisely. What a reader compares a mitigation against is the
# variation from training itself, which only the seeds carry: every training rule below is a test
# across seeds (Student t on S - 1 degrees of freedom), never a bootstrap over windows.

MIN_SEEDS = 2  # a test across seeds needs at least two; one seed is "not assessable at this profile"
# seed_reach's bound on a plausible effect, in paired seed-to-seed sds (an effect of k sds: a
# standardized paired effect |mean d_s| / sd(d_s) of k). Measured, not chosen: the largest standardized
# paired effect on the final validation loss of any edit in the committed default grid that keeps the
# skip path (every alpha > 0 cut and both gates, each vs the baseline of its seed): 1.75, alpha = 0.5 at
# block 4 (+0.150 nats, sd 0.085; the grid as it stood before issue 34, whose verdict files are kept in
# benchmarks/verdicts-before-issue-34/; tests/test_training_verdicts.py checks it against them). The next
# were 1.19 (the learned gates) and 1.16 (alpha = 0.5 at block 5). The alpha = 0 cuts (2.5-7.2 sds) are
# left out: they remove the path. Units-free, so it reads the rank and depth rows as it reads the loss
# rows. Declared, not re-fitted: the grid retrained under oneMKL's reproducible kernels (issue 34) shows
# a larger effect for the same edit (2.78 sds: +0.112 nats, sd 0.040), so 1.75 stays the conservative
# bound (a smaller plausible effect reaches fewer outcomes), and the test checks that it still is.
PLAUSIBLE_EFFECT_SDS = 1.75

SEED_TEST = (
    "Unit: the seed (every variant of a seed starts from the same initialisation and sees the same "
    "data order). Per seed s, d_s = {what}, averaged over the evaluation {units}; statistic: the "
    "mean of d_s over the S seeds with a two-sided {level} Student-t interval on S - 1 degrees of "
    "freedom (the paired t-test across seeds); beside it the exact paired sign-flip (randomisation) "
    "test: the mean recomputed under all 2^S sign patterns of the d_s, two-sided p (no normality "
    "assumed; its p cannot fall below 2^(1-S), 0.0625 at 5 seeds). ")
MATERIAL_RULE = (
    "Claimed sign {claimed}. The t rule: reproduced if the interval excludes 0 on the claimed side AND "
    "the estimate is material (at least {margin} {unit} on that side); not reproduced if the interval "
    "excludes every effect of {margin} {unit} or more on the claimed side. A decided verdict needs the "
    "sign-flip test too: reproduced its p for the d_s against 0, not reproduced its p for the d_s "
    "against the margin (d_s - {margin} on the claimed side), below {sf_alpha:g} -- or, with fewer "
    "than {sf_seeds} seeds, where no p below {sf_alpha:g} exists, at its floor 2^(1-S) (every seed's "
    "difference on the decided side): such a verdict rests on the t-interval, is not confirmed at "
    "{sf_alpha:g} by the sign-flip test, and its row says so. Inconclusive otherwise, with the reason "
    "(seeds disagree in sign / interval straddles the margin / the sign-flip test does not confirm the "
    "t rule / underpowered: the minimum detectable effect (t_(1-{alpha}/2) + t_{power}) sd(d)/sqrt(S) "
    "exceeds the margin). Fewer than {min_seeds} seeds: not assessable at this profile.")


def _signflip_ok(p: float, floor: float, sf_alpha: float) -> bool:
    """The sign-flip part of a decided verdict: p < ``sf_alpha`` where the seeds allow it, else p at its floor."""
    return p < sf_alpha if floor < sf_alpha else p <= floor * (1 + 1e-9)


def seed_test(d, *, sign: int, margin: float, level: float = LEVEL, alpha: float = TEST_ALPHA,
              power: float = POWER) -> dict[str, Any]:
    """The paired test across seeds behind every training rule: the t rule and the sign-flip test.

    ``d [n_seeds]``: one paired difference per seed; ``sign``: the claimed sign (+1: the claim says
    ``d > 0``). The t rule (:data:`MATERIAL_RULE`) proposes a verdict (``t_verdict``); a decided one
    stands only if the exact sign-flip test agrees: p of ``sign * d`` against 0 (``p_signflip``) for
    reproduced, of ``sign * d - margin`` (``p_signflip_margin``) for not reproduced, below ``1 - level``
    or, at fewer seeds than that needs (``signflip_seeds``: 6 at 0.95), at its floor ``2^(1-S)``
    (``signflip_floor``: every seed on the decided side; ``signflip_confirms`` is then False: the
    verdict rests on the t-interval). Returns ``verdict``, ``why`` (what decided it, for every
    verdict), ``estimate``, ``lo``, ``hi`` (``level`` t-interval), ``sd``, ``t``, ``p`` (t, two-sided),
    ``df``, ``mde`` (two-sided at ``alpha`` with ``power``), the sign-flip fields, ``per_seed`` (the d_s)
    and ``n``.
    """
    if sign not in (1, -1):
        raise ValueError(f"sign must be +1 or -1, got {sign}")
    x = _arr(d, "per-seed differences", 1)
    S = x.size
    sf_alpha = 1 - level
    out: dict[str, Any] = {"per_seed": x.tolist(), "n": S, "estimate": float(x.mean()) if S else None,
                           "lo": None, "hi": None, "sd": None, "t": None, "p": None, "df": S - 1, "mde": None,
                           "margin": margin, "t_verdict": None, "p_signflip": None, "p_signflip_margin": None,
                           "signflip_floor": None, "signflip_alpha": sf_alpha,
                           "signflip_seeds": stats.sign_flip_units(sf_alpha), "signflip_confirms": None,
                           "signflip_note": ""}
    if S < MIN_SEEDS:
        return {**out, "verdict": INCONCLUSIVE,
                "why": f"not assessable at this profile: {S} seed (a test across seeds needs >= {MIN_SEEDS})"}
    t = stats.paired_ttest(x)
    q = float(_sp_t.ppf((1 + level) / 2, S - 1))
    lo, hi = t["mean"] - q * t["se"], t["mean"] + q * t["se"]
    mde = stats.mde_paired_mean(t["sd"], S, alpha=alpha, power=power, sided="two")
    p0 = stats.sign_flip_test(sign * x)["p"]
    pm = stats.sign_flip_test(sign * x, null=margin)["p"]
    floor = stats.sign_flip_floor(S)
    out.update(lo=lo, hi=hi, sd=t["sd"], t=t["t"], p=t["p"], mde=mde, p_signflip=p0, p_signflip_margin=pm,
               signflip_floor=floor)
    e, elo = sign * t["mean"], min(sign * lo, sign * hi)  # on the claimed side
    ehi = max(sign * lo, sign * hi)
    on_side = int((sign * x > 0).sum())
    t_verdict = REPRODUCED if elo > 0 and e >= margin else NOT_REPRODUCED if ehi < margin else INCONCLUSIVE
    out["t_verdict"] = t_verdict
    iv = f"[{lo:.3g}, {hi:.3g}]"
    if t_verdict != INCONCLUSIVE:
        p_sf, against = (p0, "0") if t_verdict == REPRODUCED else (pm, f"the margin {margin:g}")
        if _signflip_ok(p_sf, floor, sf_alpha):
            confirms = floor < sf_alpha
            out["signflip_confirms"] = confirms
            said = ("excludes 0 on the claimed side, estimate material" if t_verdict == REPRODUCED
                    else f"excludes every effect of {margin:g} or more on the claimed side")
            note = (f"sign-flip p {p_sf:.3g} < {sf_alpha:g} against {against} confirms it" if confirms else
                    f"rests on the t-interval: sign-flip p {p_sf:.3g} against {against} is the floor at {S} "
                    f"seeds (every seed on the decided side), which cannot fall below {sf_alpha:g}: "
                    f"{out['signflip_seeds']} seeds can")
            return {**out, "verdict": t_verdict, "why": f"t-interval {iv} {said}; {note}", "signflip_note": note}
        out["signflip_confirms"] = False
        need = (f"< {sf_alpha:g}" if floor < sf_alpha else
                f"at its floor {floor:.3g} at {S} seeds, every seed on the decided side")
        why = (f"the sign-flip test does not confirm the t rule's '{t_verdict}' (interval {iv}; sign-flip p "
               f"{p_sf:.3g} against {against}, needs {need})")
        if 0 < on_side < S:
            why += f"; seeds disagree: {on_side} of {S} on the claimed side"
        return {**out, "verdict": INCONCLUSIVE, "why": why}
    if 0 < on_side < S:
        why = f"seeds disagree: {on_side} of {S} on the claimed side"
    elif elo > 0:
        why = f"significant but not material: interval excludes 0, estimate below the {margin:g} margin"
    else:
        why = f"interval straddles the margin ({margin:g})"
    if mde > margin:
        why += f"; underpowered: MDE {mde:.3g} > margin {margin:g} at {S} seeds"
    return {**out, "verdict": INCONCLUSIVE, "why": why}


def _reach_at(n_seeds: int, sd: float, margin: float, level: float, plausible_sds: float) -> dict[str, Any]:
    half = float(_sp_t.ppf((1 + level) / 2, n_seeds - 1)) * sd / math.sqrt(n_seeds)
    plausible = max(plausible_sds * sd, margin)
    rep, notrep = max(margin, half), margin - half
    return {"half_width": half, "plausible": plausible, "reproduced_from": rep, "not_reproduced_below": notrep,
            "ok_rep": rep <= plausible, "ok_not": notrep >= -plausible}


MAX_REACH_SEEDS = 1000  # seed_reach searches this far for the seed count that reaches both outcomes


def seed_reach(n_seeds: int, sd: float, *, margin: float, level: float = LEVEL,
               plausible_sds: float = PLAUSIBLE_EFFECT_SDS) -> dict[str, Any]:
    """Can :func:`seed_test` give each outcome at ``n_seeds`` seeds with paired seed-to-seed spread ``sd``?

    On the claimed side, for an observed mean equal to the effect: the smallest effect that is
    reproduced, ``max(margin, h)``, and the largest that is not reproduced, ``margin - h``, with
    ``h = t_(S-1) sd/sqrt(S)`` the interval's half-width. An outcome is reachable if its boundary lies
    within the plausible effect ``max(plausible_sds * sd, margin)`` of 0: ``plausible_sds``
    (:data:`PLAUSIBLE_EFFECT_SDS`) is the largest standardized effect the committed grid measured for an
    edit that keeps the skip path; an effect the size of the margin is always plausible (it is the
    claim's own scale). So at the committed spreads (sd >> margin) reachability is a matter of seeds:
    ``t_(S-1)/sqrt(S) <= plausible_sds`` (1.24 at 5 seeds, 2.48 at 3). The sign-flip part of the rule
    does not move these boundaries: a mean of ``h`` or more leaves room for every seed on one side.
    Returns ``reproduced_from``, ``not_reproduced_below``, ``half_width``, ``plausible``, ``reachable``,
    ``seeds_needed`` (the fewest seeds that reach both at this spread, ``None`` beyond
    :data:`MAX_REACH_SEEDS`), ``signflip_seeds`` (the fewest whose sign-flip test can confirm at
    ``1 - level``) and ``why`` (what is missing when not reachable).
    """
    if sd is None or not math.isfinite(sd) or sd < 0:
        raise ValueError(f"sd must be a finite spread >= 0, got {sd}: measure it over 2 or more seeds")
    sf_seeds = stats.sign_flip_units(1 - level)
    need = next((s for s in range(MIN_SEEDS, MAX_REACH_SEEDS + 1)
                 if all(_reach_at(s, sd, margin, level, plausible_sds)[k] for k in ("ok_rep", "ok_not"))), None)
    if n_seeds < MIN_SEEDS:
        return {"reproduced_from": None, "not_reproduced_below": None, "half_width": None, "plausible": None,
                "reachable": False, "seeds_needed": need, "signflip_seeds": sf_seeds,
                "why": f"{n_seeds} seed: needs >= {MIN_SEEDS}"}
    r = _reach_at(n_seeds, sd, margin, level, plausible_sds)
    ok_rep, ok_not = r.pop("ok_rep"), r.pop("ok_not")
    half, plausible = r["half_width"], r["plausible"]
    why = ""
    if not (ok_rep and ok_not):
        missing = [w for w, ok in (("'reproduced' needs an effect of " + f"{r['reproduced_from']:.3g}", ok_rep),
                                   ("'not reproduced' the opposite effect of " + f"{-r['not_reproduced_below']:.3g}",
                                    ok_not)) if not ok]
        why = (f"with sd {sd:.3g} over {n_seeds} seeds the interval's half-width is {half:.3g} ({half / sd:.2f} sd): "
               + " and ".join(missing) + f", beyond the plausible {plausible:.3g} ({plausible_sds:g} paired sds, the "
               "largest standardized effect the committed grid measured for an edit that keeps the skip path); "
               + (f"{need} seeds reach both" if need else f"no seed count up to {MAX_REACH_SEEDS} reaches both"))
    return {**r, "reachable": ok_rep and ok_not, "seeds_needed": need, "signflip_seeds": sf_seeds, "why": why}


def no_test(n_seeds: int, margin: float, why: str) -> dict[str, Any]:
    """What a rule reports when it does not apply (not applicable / no such state): no estimate,
    no interval, no per-seed values; the row is inconclusive with ``why``."""
    return {"per_seed": None, "n": n_seeds, "estimate": None, "lo": None, "hi": None, "sd": None, "t": None,
            "p": None, "df": n_seeds - 1, "mde": None, "margin": margin, "t_verdict": None, "p_signflip": None,
            "p_signflip_margin": None, "signflip_floor": None, "signflip_alpha": None, "signflip_seeds": None,
            "signflip_confirms": None, "signflip_note": "", "verdict": INCONCLUSIVE, "why": why}


def per_seed_mean(x, name: str, n_units: int | None = None) -> np.ndarray:
    """``[n_seeds]``: each seed's mean over its windows of ``x [n_seeds, n_windows]``."""
    return _per_seed(x, name, n_units).mean(axis=1)


def _paired_seeds(x, base, name: str) -> np.ndarray:
    """Per-seed mean of ``x - base`` (both ``[n_seeds, n_windows]``, seed s paired with seed s)."""
    b = _per_seed(base, "baseline losses")
    a = _per_seed(x, name, b.shape[1])
    if a.shape[0] != b.shape[0]:
        raise ValueError(f"{name} has {a.shape[0]} seeds, the baseline {b.shape[0]}: pair them by seed")
    return (a - b).mean(axis=1)


def _seed_row(claim_id: str, test: Mapping[str, Any], *, model: str, variant: str | None, statistic: str,
              rule: str, source: str, n_windows: int | None = None, details: dict | None = None,
              verdict: str | None = None, why: str | None = None, unit: str = "nats") -> VerdictRow:
    """One training row from a :func:`seed_test` (``verdict``/``why`` override the test's); every row,
    decided or not, says in ``details["why"]`` what decided it."""
    v = test["verdict"] if verdict is None else verdict
    w = test["why"] if why is None else why
    return _row(claim_id, model=model, variant=variant, verdict=v, statistic=statistic,
                estimate=test["estimate"], lo=test["lo"], hi=test["hi"], level=LEVEL if test["lo"] is not None else None,
                n=test["n"], rule=rule, source=source,
                details={"unit": "seed", "per_seed_values": test["per_seed"], "sd": test["sd"], "t": test["t"],
                         "p": test["p"], "df": test["df"], "mde": test["mde"], "mde_unit": unit,
                         "margin": test["margin"], "t_verdict": test["t_verdict"], "p_signflip": test["p_signflip"],
                         "p_signflip_margin": test["p_signflip_margin"], "signflip_floor": test["signflip_floor"],
                         "signflip_seeds": test["signflip_seeds"], "signflip_confirms": test["signflip_confirms"],
                         "why": w, "windows_per_seed": n_windows, **(details or {})})


def _fmt_rule(head: str, *, what: str, claimed: str, margin: float, unit: str = "nats", units: str = "windows",
              level: float = LEVEL, alpha: float = TEST_ALPHA, power: float = POWER) -> str:
    return (head + " " + SEED_TEST.format(what=what, units=units, level=level)
            + MATERIAL_RULE.format(claimed=claimed, margin=margin, unit=unit, alpha=alpha, power=power,
                                   min_seeds=MIN_SEEDS, **_derived({"level": level})))


C2_ALPHA0_RULE = (
    "C2-training.alpha0-hurts (block {block}). d_s = final validation loss of the model trained with "
    "the block's skip path cut (alpha = 0) minus the baseline of the same seed.")


@_rule(C2_ALPHA0_RULE.replace("{block}", "b") + " " + SEED_TEST + MATERIAL_RULE)
def c2_training_alpha0(baseline, cut, *, block: int, model: str, margin: float = LOSS_MARGIN,
                       level: float = LEVEL, source: str = "", what: str = "cut - baseline",
                       units: str = "windows", claimed: str = "positive (the cut hurts)",
                       unit: str = "nats", alpha: float = TEST_ALPHA, power: float = POWER,
                       min_seeds: int = MIN_SEEDS) -> list[VerdictRow]:
    """Training with alpha = 0 at ``block`` vs the baseline (``[n_seeds, n_windows]`` validation
    losses, seed s paired with seed s)."""
    d = _paired_seeds(cut, baseline, "cut losses")
    test = seed_test(d, sign=1, margin=margin, level=level, alpha=alpha, power=power)
    rule = _fmt_rule(C2_ALPHA0_RULE.format(block=block), what=what, claimed=claimed, margin=margin, level=level)
    return [_seed_row("C2-training.alpha0-hurts", test, model=model, variant=f"alpha=0 at block {block}",
                      statistic="final validation loss, cut - baseline (nats, mean over seeds)", rule=rule,
                      source=source, n_windows=_per_seed(baseline, "baseline losses").shape[1])]


def _cut_stack(baseline, cuts: Mapping[int, Any]) -> tuple[np.ndarray, list[int]]:
    """``[k, n_seeds]`` per-seed mean change (cut - baseline) of each cut, blocks in order."""
    if len(cuts) < 1:
        raise ValueError("no trained cut given")
    layers = sorted(int(l) for l in cuts)
    return np.stack([_paired_seeds(cuts[l], baseline, f"cut at block {l}") for l in layers]), layers


C2_TRAINING_LAYER_RULE = (
    "C2-training.layer-sensitive. At one alpha, per seed the change d_(s,l) = cut at block l - "
    "baseline (mean over windows), for each of the k trained blocks. Statistic: the largest "
    "between-block contrast, the mean over seeds of d_(s,i) - d_(s,j) for the pair (i, j) of blocks "
    "whose means lie furthest apart. Test: for every one of the k(k-1)/2 pairs a two-sided paired "
    "t-interval across seeds at the Bonferroni level 1 - (1 - {level})/(k(k-1)/2) (the pair is "
    "picked after looking, so every pair is tested). Reproduced if the furthest pair's interval "
    "excludes 0 and its estimate is at least {threshold} nats (a 10% perplexity difference between "
    "choices of block); not reproduced if every pair's interval lies inside (-{threshold}, "
    "{threshold}) nats; inconclusive otherwise. Fewer than {min_seeds} seeds: not assessable.")


@_rule(C2_TRAINING_LAYER_RULE)
def c2_training_layer_sensitive(baseline, cuts: Mapping[int, Any], *, alpha_value: float, model: str,
                                threshold: float = SPREAD_THRESHOLD, level: float = LEVEL,
                                min_seeds: int = MIN_SEEDS, source: str = "") -> list[VerdictRow]:
    """Training with one block attenuated by ``alpha_value``, for several blocks: does the block matter?

    ``baseline [n_seeds, n_windows]``; ``cuts``: block -> ``[n_seeds, n_windows]`` final validation
    losses (seed s paired with the baseline's seed s).
    """
    x, layers = _cut_stack(baseline, cuts)
    k, S = x.shape
    if k < 2:
        raise ValueError("layer sensitivity needs cuts at 2 or more blocks")
    n_w = _per_seed(baseline, "baseline losses").shape[1]
    rule = C2_TRAINING_LAYER_RULE.format(level=level, threshold=threshold, min_seeds=min_seeds)
    means = x.mean(axis=1)
    hi_i, lo_i = int(means.argmax()), int(means.argmin())
    pairs = [(i, j) for i in range(k) for j in range(i + 1, k)]
    level_b = bonferroni_level(level, len(pairs))
    head = x[hi_i] - x[lo_i]
    test = seed_test(head, sign=1, margin=threshold, level=level_b)
    details = {"block_means": dict(zip(map(str, layers), means.tolist())), "most_harmful_block": layers[hi_i],
               "least_harmful_block": layers[lo_i], "bonferroni_level": level_b, "threshold": threshold}
    if S < min_seeds:
        verdict, why = INCONCLUSIVE, test["why"]
    else:
        ivs = [seed_test(x[i] - x[j], sign=1, margin=threshold, level=level_b) for i, j in pairs]
        inside = all(-threshold < iv["lo"] and iv["hi"] < threshold for iv in ivs)
        if test["lo"] > 0 and test["estimate"] >= threshold:
            verdict, why = REPRODUCED, ""
        elif inside:
            verdict, why = NOT_REPRODUCED, ""
        else:
            verdict = INCONCLUSIVE
            why = ("a block contrast is significant but below the threshold" if test["lo"] > 0 else
                   "the furthest pair's interval straddles the threshold")
    return [_seed_row("C2-training.layer-sensitive", test, model=model, variant=f"alpha={alpha_value:g}",
                      statistic=f"largest block contrast of the loss change at alpha={alpha_value:g} "
                                f"(block {layers[hi_i]} - block {layers[lo_i]}, nats, mean over seeds)",
                      rule=rule, source=source, n_windows=n_w, details=details, verdict=verdict, why=why)]


C2_TRAINING_LATE_RULE = (
    "C2-training.late-cut. Candidates fixed in advance, no selection step: every trained cut at "
    "this alpha at a block l >= {late_fraction:.3g} L. Per candidate, d_s = cut - baseline of the "
    "same seed (mean over windows); a one-sided paired t-test across seeds (H1: mean < 0), Holm "
    "correction across the candidates at family level {alpha}. Reproduced if Holm rejects for at "
    "least one candidate whose mean improvement is material (at least {margin} nats); not "
    "reproduced if every candidate's two-sided {level} t-interval across seeds lies above -{margin} "
    "nats (an improvement of {margin} nats or more is ruled out for each); inconclusive otherwise. "
    "Shown: the candidate with the lowest mean, its interval, and its minimum detectable effect "
    "(t_(1-{alpha}/k) + t_{power}) sd(d)/sqrt(S) in seed units. Fewer than {min_seeds} seeds: not "
    "assessable.")


@_rule(C2_TRAINING_LATE_RULE)
def c2_training_late_cut(baseline, cuts: Mapping[int, Any], *, alpha_value: float, n_layers: int, model: str,
                         late_fraction: float = LATE_FRACTION, alpha: float = TEST_ALPHA, margin: float = LOSS_MARGIN,
                         power: float = POWER, level: float = LEVEL, min_seeds: int = MIN_SEEDS,
                         source: str = "") -> list[VerdictRow]:
    """Training with one late block attenuated by ``alpha_value``: does validation loss improve?

    Shapes as in :func:`c2_training_layer_sensitive`; blocks below ``late_fraction * n_layers`` are
    ignored.
    """
    x, layers = _cut_stack(baseline, cuts)
    keep = [i for i, l in enumerate(layers) if is_late(l, n_layers, late_fraction)]
    if not keep:
        raise ValueError(f"no trained cut at a block >= {late_fraction:.3g} x {n_layers}: train late cuts")
    x, layers = x[keep], [layers[i] for i in keep]
    k, S = x.shape
    n_w = _per_seed(baseline, "baseline losses").shape[1]
    rule = C2_TRAINING_LATE_RULE.format(late_fraction=late_fraction, alpha=alpha, level=level, margin=margin,
                                        power=power, min_seeds=min_seeds)
    tests = [seed_test(x[i], sign=-1, margin=margin, level=level, alpha=alpha / k, power=power) for i in range(k)]
    h = int(x.mean(axis=1).argmin())
    cands = [{"block": l, "mean": t["estimate"], "lo": t["lo"], "hi": t["hi"], "mde": t["mde"],
              "per_seed_values": t["per_seed"]} for l, t in zip(layers, tests)]
    if S < min_seeds:
        verdict, why = INCONCLUSIVE, tests[h]["why"]
    else:
        p = [stats.paired_ttest(x[i], alternative="less")["p"] for i in range(k)]
        adj = stats.holm(p)
        for c, pi, a in zip(cands, p, adj):
            c.update(p=float(pi), p_holm=float(a), rejected=bool(a <= alpha))
        if any(c["rejected"] and c["mean"] <= -margin for c in cands):
            verdict, why = REPRODUCED, ""
        elif all(c["lo"] > -margin for c in cands):
            verdict, why = NOT_REPRODUCED, ""
        else:
            verdict = INCONCLUSIVE
            why = ("Holm rejects only for an improvement below the margin" if any(c["rejected"] for c in cands)
                   else "no candidate is rejected and some interval reaches below -margin")
            if tests[h]["mde"] > margin:
                why += f"; underpowered: MDE {tests[h]['mde']:.3g} > margin {margin:g} at {S} seeds"
    return [_seed_row("C2-training.late-cut", tests[h], model=model, variant=f"block {layers[h]}, alpha={alpha_value:g}",
                      statistic="final validation loss, cut - baseline (nats, mean over seeds)", rule=rule,
                      source=source, n_windows=n_w, details={"candidates": cands, "blocks": layers},
                      verdict=verdict, why=why)]


C3_TRAINING_BASELINE_RULE = (
    "C3-training.beats-baseline. d_s = final validation loss of the model trained with the gates "
    "minus the baseline of the same seed.")


@_rule(C3_TRAINING_BASELINE_RULE + " " + SEED_TEST + MATERIAL_RULE)
def c3_training_beats_baseline(gated, baseline, *, model: str, variant: str | None, margin: float = LOSS_MARGIN,
                               level: float = LEVEL, source: str = "", what: str = "gated - baseline",
                               units: str = "windows", claimed: str = "negative (the gates lower the loss)",
                               unit: str = "nats", alpha: float = TEST_ALPHA, power: float = POWER,
                               min_seeds: int = MIN_SEEDS) -> list[VerdictRow]:
    """Gates trained with the model vs the baseline (``[n_seeds, n_windows]`` each, paired by seed)."""
    d = _paired_seeds(gated, baseline, "gated losses")
    test = seed_test(d, sign=-1, margin=margin, level=level, alpha=alpha, power=power)
    rule = _fmt_rule(C3_TRAINING_BASELINE_RULE, what=what, claimed=claimed, margin=margin, level=level)
    return [_seed_row("C3-training.beats-baseline", test, model=model, variant=variant,
                      statistic="final validation loss, gated - baseline (nats, mean over seeds)", rule=rule,
                      source=source, n_windows=_per_seed(baseline, "baseline losses").shape[1])]


C3_TRAINING_CUTS_RULE = (
    "C3-training.beats-best-cut. No selection step: the gates must beat EVERY trained fixed cut and "
    "the baseline (alpha = 1), so they beat the best of them whichever it is (an intersection-union "
    "test: no correction is needed). Per candidate c, d_s = gated - c of the same seed (mean over "
    "windows) and the paired seed test of C3-training.beats-baseline (claimed sign negative, margin "
    "{margin} nats): a two-sided {level} t-interval across seeds and the exact sign-flip test, a "
    "decided verdict needing both (p < {sf_alpha:g}, or at its floor 2^(1-S), every seed on the decided "
    "side, with fewer than {sf_seeds} seeds). Reproduced if every candidate's test is reproduced "
    "(its interval below 0, the gates at least {margin} nats lower); not reproduced if some "
    "candidate's test is not reproduced (its interval above -{margin} nats: an improvement of "
    "{margin} nats or more over it is ruled out); inconclusive otherwise. Shown, named in the "
    "statistic: the candidate that decides -- for not reproduced the one whose interval lies "
    "furthest above -{margin}; for reproduced the one beaten by the least (highest upper end); "
    "for inconclusive the open one whose interval reaches highest; every candidate's numbers are in "
    "the details. Fewer than {min_seeds} seeds: not assessable.")


@_rule(C3_TRAINING_CUTS_RULE)
def c3_training_beats_every_cut(gated, candidates: Mapping[str, Any], *, model: str, variant: str | None,
                                margin: float = LOSS_MARGIN, level: float = LEVEL, min_seeds: int = MIN_SEEDS,
                                source: str = "") -> list[VerdictRow]:
    """Gates vs every fixed cut and the baseline: ``candidates`` name -> ``[n_seeds, n_windows]``
    final validation losses (include ``"baseline"``), ``gated`` the same shape, paired by seed.

    The row's estimate and interval are those of the candidate that decides the verdict
    (``details["deciding_candidate"]``, named in the statistic), and ``details["why"]`` says how it
    decided; ``details["best_candidate"]`` is the candidate with the lowest mean loss."""
    if not candidates:
        raise ValueError("no candidate given: pass the baseline and the fixed cuts")
    names = list(candidates)
    tests = {n: seed_test(_paired_seeds(gated, candidates[n], f"gated vs {n}"), sign=-1, margin=margin, level=level)
             for n in names}
    best = min(names, key=lambda n: per_seed_mean(candidates[n], n).mean())
    S = tests[best]["n"]
    k = len(names)

    def shown(n):
        t = tests[n]
        return f"{n}: {t['estimate']:+.3g} nats [{t['lo']:.3g}, {t['hi']:.3g}]"

    if S < min_seeds:
        decider, verdict = best, INCONCLUSIVE
        why = tests[best]["why"]
        role = "the lowest-mean candidate"
    else:
        ruled_out = [n for n in names if tests[n]["verdict"] == NOT_REPRODUCED]
        open_ = [n for n in names if tests[n]["verdict"] == INCONCLUSIVE]
        if ruled_out:
            decider, verdict = max(ruled_out, key=lambda n: tests[n]["lo"]), NOT_REPRODUCED
            role = "the candidate the gates do not beat"
            why = (f"not beaten: {shown(decider)} lies above -{margin:g} "
                   + (f"({len(ruled_out)} of {k} candidates do)" if len(ruled_out) > 1 else "(the only candidate that does)")
                   + f"; {tests[decider]['signflip_note']}")
        elif not open_:
            decider, verdict = max(names, key=lambda n: tests[n]["hi"]), REPRODUCED
            role = "the candidate beaten by the least"
            why = (f"every one of the {k} candidates beaten (interval below 0, at least {margin:g} lower); by the "
                   f"least {shown(decider)}; {tests[decider]['signflip_note']}")
        else:
            decider, verdict = max(open_, key=lambda n: tests[n]["hi"]), INCONCLUSIVE
            role = "the open candidate reaching highest"
            why = (f"candidates neither beaten nor ruled out ({len(open_)} of {k}); the one reaching highest, "
                   f"{shown(decider)}: {tests[decider]['why']}")
    rule = C3_TRAINING_CUTS_RULE.format(level=level, margin=margin, min_seeds=min_seeds, **_derived({"level": level}))
    per = {n: {"mean": t["estimate"], "lo": t["lo"], "hi": t["hi"], "per_seed_values": t["per_seed"],
               "verdict": t["verdict"], "p_signflip": t["p_signflip"], "p_signflip_margin": t["p_signflip_margin"],
               "why": t["why"]} for n, t in tests.items()}
    return [_seed_row("C3-training.beats-best-cut", tests[decider], model=model, variant=variant,
                      statistic=f"final validation loss, gated - {decider} ({role}) (nats, mean over seeds)",
                      rule=rule, source=source, n_windows=_per_seed(gated, "gated losses").shape[1],
                      details={"deciding_candidate": decider, "best_candidate": best, "candidates": per},
                      verdict=verdict, why=why)]


MISALIGNMENT_TRAINING_RULE = (
    "{claim_id}. The input token's persistence measured so that a flatter output distribution does "
    "not move it: the lens's log10 rank of the input token x_t (rank does not change when every "
    "logit is scaled or shifted), averaged over the states after the edit and before the output, "
    "{after}. d_s = that average with the edit minus without it, same seed, mean over the lens "
    "windows.")
MITIGATION_LOSS_CLAUSE = (
    " An edit counts as a mitigation only if it does not make the model materially worse, one "
    "condition for gates and fixed cuts alike: the paired seed test above (t-interval and sign-flip "
    "test) on the loss of the same windows, d_s = loss with the edit - without it, claimed sign "
    "positive, margin {loss_margin} nats. When it says reproduced (the loss is materially worse), the "
    "row is not reproduced ('not a mitigation'); when the rank test says reproduced and the loss "
    "test is inconclusive, the row is inconclusive; otherwise the rank test decides.")


def _rank_after(curves, layers: Sequence[int]) -> np.ndarray:
    """Per seed, the mean over windows and ``layers`` of ``logrank_input`` (``[n_seeds, n_windows, L+1]``)."""
    a = _arr(curves, "logrank_input", 3)
    return a[:, :, list(layers)].mean(axis=(1, 2))


@_rule(MISALIGNMENT_TRAINING_RULE.replace("{claim_id}", "C3-training.misalignment / C2-training.cut-misalignment")
       .replace("{after}", "h_(b+1)..h_(L-1)") + " " + SEED_TEST + MATERIAL_RULE + MITIGATION_LOSS_CLAUSE)
def training_misalignment(before_rank, after_rank, *, after_layers: Sequence[int], model: str, variant: str,
                          loss_before, loss_after, fixed_cut: bool = False,
                          margin: float = MISALIGNMENT_MARGINS["logrank"], loss_margin: float = LOSS_MARGIN,
                          level: float = LEVEL, source: str = "", what: str = "edited - baseline",
                          units: str = "windows", claimed: str = "positive (the input token ranks lower)",
                          unit: str = "log10 rank", alpha: float = TEST_ALPHA, power: float = POWER,
                          min_seeds: int = MIN_SEEDS) -> list[VerdictRow]:
    """Does the edit make the input token less decodable on the layers it leaves before the output,
    without making the model materially worse?

    ``before_rank``, ``after_rank``: ``[n_seeds, n_windows, L+1]`` lens ``logrank_input`` curves of
    the baseline and the edited model, seed s paired with seed s, the same windows. ``after_layers``:
    the residual states between the edit and the output (``h_(b+1)..h_(L-1)`` for a cut at block b;
    ``h_1..h_(L-1)`` for gates at every block); empty: not applicable (reported, inconclusive).
    ``loss_before``/``loss_after``: ``[n_seeds, n_windows]`` losses on the same windows; they decide
    whether the edit counts as a mitigation, for gates and fixed cuts alike.
    Claim id ``C3-training.misalignment`` (gates) or ``C2-training.cut-misalignment`` (a fixed cut).
    """
    cid = "C2-training.cut-misalignment" if fixed_cut else "C3-training.misalignment"
    if loss_before is None or loss_after is None:
        raise ValueError(f"{cid} needs loss_before and loss_after (the losses on the lens windows): an edit "
                         "counts as a mitigation only if its loss is not materially worse")
    b, a = _arr(before_rank, "before_rank", 3), _arr(after_rank, "after_rank", 3)
    if a.shape != b.shape:
        raise ValueError(f"before and after curves differ in shape: {b.shape} vs {a.shape} (same seeds, windows)")
    L = b.shape[2] - 1
    idx = [int(l) for l in after_layers]
    if any(not 1 <= l <= L - 1 for l in idx):
        raise ValueError(f"after_layers must lie within 1..{L - 1} (after the edit, before the output h_{L})")
    after = f"h_{idx[0]}..h_{idx[-1]}" if idx else "none"
    rule = (_fmt_rule(MISALIGNMENT_TRAINING_RULE.format(claim_id=cid, after=after), what=what, claimed=claimed,
                      margin=margin, unit=unit, level=level)
            + MITIGATION_LOSS_CLAUSE.format(loss_margin=loss_margin))
    details: dict[str, Any] = {"after_layers": idx}
    loss_test = seed_test(_paired_seeds(loss_after, loss_before, "loss_after"), sign=1, margin=loss_margin,
                          level=level)
    details["loss_change"] = {k: loss_test[k] for k in ("estimate", "lo", "hi", "per_seed", "verdict", "why",
                                                        "p_signflip", "p_signflip_margin")}
    if not idx:
        test = no_test(b.shape[0], margin, f"not applicable: no residual state lies between the edit and the "
                                           f"output h_{L}")
        return [_seed_row(cid, test, model=model, variant=variant,
                          statistic="input-token log10 rank between the edit and the output, edited - baseline",
                          rule=rule, source=source, n_windows=b.shape[1], details=details, unit="log10 rank")]
    test = seed_test(_rank_after(a, idx) - _rank_after(b, idx), sign=1, margin=margin, level=level, alpha=alpha,
                     power=power)
    verdict, why = test["verdict"], test["why"]
    details.update(before=float(_rank_after(b, idx).mean()), after=float(_rank_after(a, idx).mean()))
    loss = (f"{loss_test['estimate']:+.3g} nats [{loss_test['lo']:.3g}, {loss_test['hi']:.3g}]"
            if loss_test["lo"] is not None else "no interval")
    details["loss_materially_worse"] = loss_test["verdict"] == REPRODUCED
    if loss_test["verdict"] == REPRODUCED:
        verdict = NOT_REPRODUCED
        why = f"not a mitigation: the loss is materially worse ({loss}; {loss_test['why']})"
    elif verdict == REPRODUCED and loss_test["verdict"] == INCONCLUSIVE:
        verdict, why = INCONCLUSIVE, f"the rank rises, but whether the loss is materially worse is open ({loss}: {loss_test['why']})"
    else:
        why += ("; the loss is not materially worse (" if loss_test["verdict"] == NOT_REPRODUCED else
                "; whether the loss is materially worse is open (") + f"{loss})"
    return [_seed_row(cid, test, model=model, variant=variant,
                      statistic=f"input-token log10 rank over {after}, edited - baseline (mean over seeds)",
                      rule=rule, source=source, n_windows=b.shape[1], details=details, verdict=verdict, why=why,
                      unit="log10 rank")]


EMERGENCE_TRAINING_RULE = (
    "C3-training.emergence-shift / C2-training.cut-emergence-shift. Per seed, the next-token emergence depth of the seed's mean "
    "{metric} curve (where it has covered half its way from h_{start} to h_L), as a share of the "
    "depth; d_s = with the edit minus without it.")


@_rule(EMERGENCE_TRAINING_RULE + " " + SEED_TEST + MATERIAL_RULE)
def training_emergence_shift(before_next, after_next, *, model: str, variant: str, forced: bool = False,
                             fixed_cut: bool = False,
                             metric: str = "top1", start: int = 1, margin: float = MISALIGNMENT_MARGINS["depth"],
                             level: float = LEVEL, source: str = "", what: str = "edited - baseline",
                             units: str = "windows", claimed: str = "negative (the next token emerges earlier)",
                             unit: str = "of the depth", alpha: float = TEST_ALPHA, power: float = POWER,
                             min_seeds: int = MIN_SEEDS) -> list[VerdictRow]:
    """``before_next``, ``after_next``: ``[n_seeds, n_windows, L+1]`` next-token curves. ``forced``: the
    edit itself forces the answer (an alpha = 0 cut makes the curve flat before the cut, so the
    half-way point must fall at it): the row is reported as not applicable. Claim id
    ``C3-training.emergence-shift`` (gates) or ``C2-training.cut-emergence-shift`` (``fixed_cut``)."""
    cid = "C2-training.cut-emergence-shift" if fixed_cut else "C3-training.emergence-shift"
    b, a = _arr(before_next, "before_next", 3), _arr(after_next, "after_next", 3)
    L = b.shape[2] - 1
    rule = _fmt_rule(EMERGENCE_TRAINING_RULE.format(metric=metric, start=start), what=what, claimed=claimed,
                     margin=margin, unit=unit, level=level)

    def depth(x):
        out = []
        for s in range(x.shape[0]):
            h = stats.halfway_point(x[s].mean(axis=0)[start:])
            out.append(np.nan if h is None else (h + start) / L)
        return np.asarray(out)

    db, da = depth(b), depth(a)
    details = {"before": db.tolist(), "after": da.tolist(), "forced": forced}
    if forced or not (np.isfinite(db).all() and np.isfinite(da).all()):
        why = ("not applicable: the alpha = 0 cut forces the shift (the next-token curve is flat before it)"
               if forced else "a seed's next-token curve is flat (no half-way point)")
        return [_seed_row(cid, no_test(b.shape[0], margin, why), model=model, variant=variant,
                          statistic="next-token emergence depth l/L, edited - baseline", rule=rule, source=source,
                          n_windows=b.shape[1], details=details, unit="of the depth")]
    test = seed_test(da - db, sign=-1, margin=margin, level=level, alpha=alpha, power=power)
    return [_seed_row(cid, test, model=model, variant=variant,
                      statistic=f"next-token emergence depth l/L ({metric}), edited - baseline (mean over seeds)",
                      rule=rule, source=source, n_windows=b.shape[1], details=details, unit="of the depth")]


C1_SEEDS_RULE = (
    "{claim_id} across seeds. Each seed's trained baseline is judged by the rule of {claim_id} on its "
    "own lens windows; seeds are the unit: reproduced if every seed is, not reproduced if every seed "
    "is not, inconclusive otherwise ('seeds disagree'). Shown: the mean over seeds of the per-seed "
    "estimates. What the per-seed rule marks carries over: post hoc (with the pre-registered rule's "
    "verdicts combined the same way) and not evidence.")


def c1_across_seeds(rows_by_seed: Sequence[Sequence[VerdictRow]], *, model: str, source: str = "") -> list[VerdictRow]:
    """One row per C1 claim id from each seed's rows (``c1_regimes`` + ``c1_depth`` of each seed)."""
    if not rows_by_seed:
        raise ValueError("no seed's rows given")
    out = []
    n = len(rows_by_seed[0])
    if any(len(rows) != n or [r.claim_id for r in rows] != [r.claim_id for r in rows_by_seed[0]]
           for rows in rows_by_seed):
        raise ValueError("every seed's rows must come from the same rules, in the same order")
    for i in range(n):
        per = [rows[i] for rows in rows_by_seed]
        cid = per[0].claim_id
        verdicts_ = [r.verdict for r in per]
        v = stats.combine_verdicts(verdicts_, how="unanimous")
        est = [r.estimate for r in per]
        mean = float(np.mean(est)) if all(e is not None for e in est) else None
        marks = {}  # what each seed's rule marked, carried over: post hoc, pre-registered, not evidence
        if all(r.details.get("post_hoc") for r in per):
            marks["post_hoc"] = True
        pre = [r.details.get("pre_registered_verdict") for r in per]
        if all(p_ in OUTCOMES for p_ in pre):
            marks.update(pre_registered_verdict=stats.combine_verdicts(pre, how="unanimous"),
                         pre_registered_per_seed=pre)
        if not any(is_evidence(r) for r in per):
            marks.update(_not_evidence(per[0].details.get("evidence_why") or "its rule marks it not evidence"))
        out.append(_row(cid, model=model, variant=f"{per[0].variant}, seeds as the unit", verdict=v,
                        statistic=per[0].statistic + " (mean over seeds)", estimate=mean, lo=None, hi=None,
                        level=None, n=len(per), rule=C1_SEEDS_RULE.format(claim_id=cid), per_seed=verdicts_,
                        source=source,
                        details={"unit": "seed", "per_seed_values": est, **marks,
                                 "why": "" if v != INCONCLUSIVE else (
                                     "seeds disagree" if len(set(verdicts_)) > 1 else "every seed is inconclusive")}))
    return out
