"""The verdict row (:class:`VerdictRow`), its file layout, the claim ids and their words."""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping


from ...core.outputs import NotJSONError, json_ready
from ..stats import OUTCOMES


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
