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


def test_a_docstring_or_comment_changes_no_fingerprint(tmp_path, monkeypatch):
    import importlib
    import sys

    src = 'K = 2\n\ndef rule(x):\n    """words"""\n    return x > K  # a comment\n'
    edited = 'K = 2\n\ndef rule(x):\n    """other words,\n    longer"""\n    # a new comment\n    return x > K\n'
    changed = 'K = 2\n\ndef rule(x):\n    return x >= K\n'
    monkeypatch.syspath_prepend(str(tmp_path))
    prints = []
    for text in (src, edited, changed):
        (tmp_path / "fp_probe.py").write_text(text)
        sys.modules.pop("fp_probe", None)
        importlib.invalidate_caches()
        monkeypatch.setitem(sys.modules, "residshift.fp_probe", importlib.import_module("fp_probe"))
        prints.append(C.fingerprint(("fp_probe:rule", "fp_probe:K")))
    assert prints[0] == prints[1] != prints[2]


def test_the_registry_is_short_and_every_claim_reads_its_numbers():
    assert 8 <= len(C.CLAIMS) <= 12
    assert len({c.key for c in C.CLAIMS}) == len(C.CLAIMS)
    for c in C.CLAIMS:
        outs = C.outcomes(c)
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


def test_conjunction_and_band_reach_every_outcome():
    assert C.conjunction("reproduced", "reproduced") == "reproduced"
    assert C.conjunction("reproduced", "not reproduced") == "not reproduced"
    assert C.conjunction("reproduced", "inconclusive") == "inconclusive"
    band = (0.5, 0.8)
    assert C.band_outcome(0.6, 0.7, band) == "reproduced"
    assert C.band_outcome(0.2, 0.3, band) == "not reproduced"
    assert C.band_outcome(0.45, 0.55, band) == "inconclusive"


def test_seeds_needed_for_the_papers_effect():
    assert abs(C.PAPER_EFFECT - 0.005606) < 1e-5
    # (1.96 + 0.84)^2 (sd / effect)^2: at sd = effect, 8 seeds
    assert C.seeds_needed(C.PAPER_EFFECT) == 8
    assert C.seeds_needed(0.05) == 625


def test_saved_names_the_fix_when_a_file_is_missing():
    with pytest.raises(FileNotFoundError, match="make study"):
        C.saved("99-no-such-figure")
