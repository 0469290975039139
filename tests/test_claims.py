"""The registry of primary claims (residshift/claims.py, rendered to docs/claims.md)."""
from __future__ import annotations

import subprocess

import pytest

from residshift import claims as C
from residshift.core.paths import REPO_ROOT


@pytest.mark.parametrize("claim", C.CLAIMS, ids=[c.key for c in C.CLAIMS])
def test_a_rule_cannot_change_without_a_registry_entry(claim):
    now = C.fingerprint(claim.rule)
    assert now == claim.code, (
        f"the rule code of {claim.key} changed (fingerprint {claim.code} -> {now}): add a Revision to its entry in "
        f"residshift/claims.py (commit, what changed, whether after its numbers, what it flipped) and set code={now!r}")


def _probe(tmp_path, monkeypatch, text: str) -> str:
    """``text`` as the module residshift.analysis._fp_probe; its fingerprint of ``rule``."""
    import importlib.util
    import sys

    path = tmp_path / "fp_probe.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("residshift.analysis._fp_probe", path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "residshift.analysis._fp_probe", module)
    spec.loader.exec_module(module)
    return C.fingerprint(("analysis._fp_probe:rule",))


def test_a_fingerprint_follows_the_code_a_rule_calls_and_ignores_its_words(tmp_path, monkeypatch):
    base = 'K = 2\nWHY = "a long sentence that explains the rule"\n\ndef helper(x):\n    return x > K\n\n' \
           'def rule(x):\n    """words"""\n    return helper(x), WHY  # a comment\n'
    same = base.replace('"""words"""', '"""other words,\n    longer"""').replace("explains", "states")
    prints = [_probe(tmp_path, monkeypatch, t) for t in
              (base, same, base.replace("x > K", "x >= K"), base.replace("K = 2", "K = 3"))]
    assert prints[0] == prints[1]  # a docstring, a comment, the rule's text: no change
    assert len({prints[0], prints[2], prints[3]}) == 3  # the helper's arithmetic, the threshold: a change


def test_the_registry_is_short_and_every_claim_reads_its_numbers():
    assert 8 <= len(C.CLAIMS) <= 12
    assert len({c.key for c in C.CLAIMS}) == len(C.CLAIMS)
    for c in C.CLAIMS:
        outs = C.outcomes(c)
        if c.awaiting:  # fixed before its numbers: it reads none until they exist, then the entry says so
            assert not outs and not (C.FIGURES / f"{c.source}.json").exists(), \
                f"{c.key}: figures/{c.source}.json exists: clear the entry's `awaiting`"
            continue
        assert outs and all(o.verdict in C.MARKS for o in outs), c.key
        assert all(getattr(c, f).strip() for f in ("paper", "statistic", "test", "level", "correction",
                                                    "smallest_effect", "fixed")), c.key


def test_every_named_commit_exists():
    if not (REPO_ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    import re

    text = " ".join([r.commit + " " + r.change + " " + r.flipped for c in C.CLAIMS for r in c.revisions]
                    + [c.fixed for c in C.CLAIMS])
    named = set(re.findall(r"\b[0-9a-f]{7,40}\b", text))
    assert len(named) >= 10
    for commit in sorted(named):
        ok = subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=REPO_ROOT,
                            capture_output=True).returncode == 0
        assert ok, f"the registry names commit {commit}, which this repository does not have"


def test_the_revisions_issue_49_lists_are_in_the_registry():
    text = " ".join(f"{r.commit} {r.change}" for c in C.CLAIMS for r in c.revisions)
    for commit in ("6dd3d8a", "bc534aa"):
        assert commit in text
    assert "447766a" in (REPO_ROOT / "docs" / "claims.md").read_text()  # the withdrawn plausible effect


def test_the_switch_and_concentration_claims_can_come_out_every_way():
    from residshift.analysis.verdicts import DEPTH_BAND, band_verdict
    from residshift.analysis.verdicts.c1 import _joint

    assert [_joint(p) for p in (["reproduced"] * 2, ["reproduced", "not reproduced"], ["reproduced", "inconclusive"])] \
        == ["reproduced", "not reproduced", "inconclusive"]
    # the crossing's interval: inside the band, clear below it (as committed: 0.20-0.31), across its edge
    assert [band_verdict(lo, hi, DEPTH_BAND) for lo, hi in ((0.6, 0.7), (0.2, 0.31), (0.45, 0.55))] \
        == ["reproduced", "not reproduced", "inconclusive"]


def test_seeds_needed_for_the_papers_effect():
    assert abs(C.PAPER_EFFECT - 0.005606) < 1e-5
    # (1.96 + 0.84)^2 (sd / effect)^2: at sd = effect, 8 seeds
    assert C.seeds_needed(C.PAPER_EFFECT) == 8
    assert C.seeds_needed(0.05) == 625


def test_saved_names_the_fix_when_a_file_is_missing():
    with pytest.raises(FileNotFoundError, match="make study"):
        C.saved("99-no-such-figure")


def test_every_training_claim_says_the_scale_it_speaks_for():
    for c in C.CLAIMS:
        text = C.scale(c)
        assert bool(text) == c.key.endswith("/trained"), c.key
        if c.key == "C1.switch/trained":  # the probe asks the scale question itself
            assert text.startswith("its own cells"), text
        elif text:  # as committed: the 6x128 baselines are near-bigram, so no training row is evidence
            assert text.startswith("near-bigram, S1 0.74") and text.endswith("not counted as evidence"), text


def test_a_damaged_numbers_file_names_the_fix(tmp_path, monkeypatch):
    (tmp_path / "03-x.json").write_text('{"cut": ')
    monkeypatch.setattr(C, "FIGURES", tmp_path)
    with pytest.raises(ValueError, match="damaged .*git checkout"):
        C.saved("03-x")


def test_the_probe_rule_reaches_every_outcome_at_three_seeds():
    """C1.switch/trained (analysis.departure): deep, early and inconclusive are all reachable with the
    default's 3 seeds and 12 blocks; a cell with fewer seeds or an undertrained seed is inconclusive."""
    from residshift.analysis import departure as D

    R, N, I = "reproduced", "not reproduced", "inconclusive"
    deep, early = [8 / 12] * 3, [1 / 12] * 3
    assert D.cell_outcome(deep, [R] * 3)[:2] == (R, D.DEEP_SWITCH)
    assert D.cell_outcome(early, [N] * 3)[:2] == (N, D.EARLY)
    assert D.cell_outcome([3 / 12, 5 / 12, 7 / 12], [N] * 3)[0] == I  # straddles 0.5
    assert D.cell_outcome(deep, [R, R, N])[0] == I  # deep, but no quiet middle on one seed
    assert D.cell_outcome(deep[:2], [R] * 2)[0] == I  # two seeds: not assessable
    assert D.cell_outcome([None, 0.5, 0.5], [R] * 3)[0] == I  # a seed never left the unigram level
    assert D.departure_depth([0.0, 0.01, 0.03, 0.5], 0.0) == 2 / 3
    assert D.departure_depth([0.0, 0.01, 0.01], 0.0) is None
