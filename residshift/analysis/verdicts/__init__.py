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
(thresholds, margins, bands) are set here. Most were revised after their first numbers:
docs/claims.md (``residshift.claims``) lists every revision of a primary claim's rule and what it
flipped. Two shapes recur:

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
# One module per claim family; every name is re-exported here, so ``verdicts.c1_regimes`` and the rest
# read as before: row (schema), rules (constants, shapes), c1, c2, c3 (and benchmarks), training.
from ..stats import INCONCLUSIVE, NOT_REPRODUCED, OUTCOMES, REPRODUCED  # noqa: F401
from .row import (  # noqa: F401
    CLAIMS, SCHEMA, VerdictError, VerdictRow, _CLAIM_ID, _finite_or_none,
    _plain, is_verdict_layout, load_verdicts, rows_from_json)
from .rules import (  # noqa: F401
    BENCH_MARGIN, C1_EXTENT_FRACTION, C1_EXTENT_SINCE, C1_MARGIN, C1_MIN_RUN, C1_NOISE_BETWEEN,
    C1_NOISE_WITHIN, C1_PLAUSIBLE_EXCESS, CONCENTRATION_RATIO, DEPTH_BAND, DEPTH_FRAC, DEPTH_START,
    LATE_FRACTION, LEVEL, LOSS_MARGIN, MAX_LATE_CANDIDATES, MIN_ATTENUATION, MIN_GATE_MOVEMENT,
    MISALIGNMENT_MARGINS, POWER, PROBE_ALPHA, SPREAD_THRESHOLD, TEST_ALPHA, _arr,
    _broadcast_seeds, _derived, _per_seed, _row, _rule, _seed_flags,
    _setting_prefix, band_verdict, bonferroni_level, c1_middle_candidates, c1_min_run, first_late_block,
    improvement_outcome, improvement_verdict, is_late, selection_confirmation, threshold_verdict, threshold_why)
from .c1 import (  # noqa: F401
    C1_DEPTH_RULE, C1_EARLY_RULE, C1_FITTED_WHY, C1_LATE_RULE, C1_LATE_WHY, C1_MIDDLE_RULE,
    C1_NOT_EVIDENCE, C1_RULE, DEPTH_METRICS, DEPTH_PRIMARY, UNDERPOWERED, _extent,
    _joint, _mark_underpowered, _not_evidence, _pre_registered, c1_depth, c1_min_extent,
    c1_min_windows, c1_power, c1_reach, c1_regimes, c1_underpowered, is_evidence)
from .c2 import (  # noqa: F401
    C2_LATE_CUT_RULE, C2_LAYER_RULE, N_PERMUTATIONS, _holm_family, _sweep_arrays, alpha0_summary,
    best_fixed_cut, c2_late_cut, c2_layer_sensitive, late_cut_candidates, permutation_spread)
from .c3 import (  # noqa: F401
    BENCH_RULE, C3_CONCENTRATION_RULE, C3_EMERGENCE_RULE, C3_MISALIGNMENT_RANK_RULE, C3_MISALIGNMENT_RULE, C3_MOVEMENT_CLAUSE,
    VS_RULE, _benchmarks, _gates_vs, _paired_by_seed, _seeds_why, _stopped_at_cap,
    bench_reach, benchmark_items_needed, c3_beats_baseline, c3_beats_best_cut, c3_benchmarks, c3_concentration,
    c3_misalignment, c4_benchmarks)
from .training import (  # noqa: F401
    C1_SEEDS_RULE, C2_ALPHA0_RULE, C2_TRAINING_LATE_RULE, C2_TRAINING_LAYER_RULE, C3_TRAINING_BASELINE_RULE, C3_TRAINING_CUTS_RULE,
    EMERGENCE_TRAINING_RULE, MATERIAL_RULE, MAX_REACH_SEEDS, MIN_SEEDS, MISALIGNMENT_TRAINING_RULE, MITIGATION_LOSS_CLAUSE,
    PLAUSIBLE_EFFECT_SDS, SEED_TEST, _cut_stack, _fmt_rule, _paired_seeds, _rank_after,
    _reach_at, _seed_row, _signflip_ok, c1_across_seeds, c2_training_alpha0, c2_training_late_cut,
    c2_training_layer_sensitive, c3_training_beats_baseline, c3_training_beats_every_cut, no_test, per_seed_mean, seed_reach,
    seed_test, training_emergence_shift, training_misalignment)

__all__ = ["REPRODUCED", "NOT_REPRODUCED", "INCONCLUSIVE", "OUTCOMES", "SCHEMA", "CLAIMS",
           "VerdictRow", "VerdictError", "load_verdicts", "rows_from_json",
           "is_verdict_layout"]
