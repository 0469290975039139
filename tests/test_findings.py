"""residshift.findings: the numbers the notebooks' authored findings quote, and the check that guards them."""
from __future__ import annotations

import json
import shutil

import pytest

from residshift import claims, findings


def test_every_notebook_has_numbers_read_from_the_committed_figures():
    assert list(findings.NUMBERS) == [f"{i:02d}" for i in range(12)]
    for nb in findings.NUMBERS:
        got = findings.numbers(nb)
        assert got and all(isinstance(k, str) for k in got), nb


def test_check_names_a_wrong_missing_or_unstated_number():
    stated = findings.numbers("04")
    findings.check("04", stated)  # as saved: passes
    key = "alpha = 0 elsewhere (min, max, nats)"
    with pytest.raises(AssertionError, match="the findings say"):
        findings.check("04", {**stated, key: (4.3, 26.5)})
    with pytest.raises(AssertionError, match="not read from the saved numbers"):
        findings.check("04", {**stated, "a number nobody reads": 1})
    with pytest.raises(AssertionError, match="but not stated"):
        findings.check("04", {k: v for k, v in stated.items() if k != key})
    with pytest.raises(KeyError, match="one of 00"):
        findings.numbers("12")


def test_a_regeneration_that_moves_a_number_fails_the_check(tmp_path, monkeypatch):
    stated = findings.numbers("06")
    figures = tmp_path / "figures"
    shutil.copytree(claims.FIGURES, figures, ignore=shutil.ignore_patterns("*.png", "*.pdf"))
    rows = json.loads((figures / "06-training-with-attenuation-verdicts.json").read_text())
    row = next(r for r in rows if r["claim_id"] == "C2-training.alpha0-hurts")
    row["estimate"] += 0.01  # 0.42 -> 0.43 at the sentence's rounding
    (figures / "06-training-with-attenuation-verdicts.json").write_text(json.dumps(rows))
    monkeypatch.setattr(claims, "FIGURES", figures)
    with pytest.raises(AssertionError, match="alpha = 0 loss change per block"):
        findings.check("06", stated)
