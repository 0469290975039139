"""study.attenuation.best_cut_findings: each branch says where the helpful cut sits, from the numbers."""
from residshift.study.attenuation import best_cut_findings


def _cell(layer, region, status, mean=-0.01, lo=-0.02, hi=-0.001, alpha=0.9):
    return {"layer": layer, "alpha": alpha, "region": region, "status": status, "mean": mean, "lo": lo, "hi": hi}


def _summary(overall, late):
    return {"m": {"overall": overall, "late": late, "margin": 0.005}}


def test_an_early_cut_that_holds_on_fresh_windows_is_named_outside_the_late_region():
    (line,) = best_cut_findings(_summary(_cell(1, "early", "confirmed"), _cell(17, "late", "ruled out", 0.02, 0.01, 0.03)))
    assert "an early cut (block 1, alpha=0.9)" in line and "outside the paper's late region" in line
    assert "-0.0100 [-0.0200, -0.0010]" in line and "+0.0200 [+0.0100, +0.0300]" in line


def test_a_late_cut_that_holds_is_said_to_be_late():
    (line,) = best_cut_findings(_summary(_cell(17, "late", "confirmed"), _cell(17, "late", "confirmed")))
    assert "is late (block 17" in line and "outside" not in line


def test_no_confirmed_cut_and_no_helpful_cut_read_differently():
    (a,) = best_cut_findings(_summary(_cell(24, "late", "ruled out", 0.007, 0.003, 0.011), _cell(24, "late", "ruled out")))
    assert "no single fixed cut is confirmed" in a and "0.005 nats or more ruled out" in a
    (u,) = best_cut_findings(_summary(_cell(3, "early", "undecided"), _cell(24, "late", "undecided")))
    assert "not ruled out either" in u
    none = {"layer": None, "alpha": None, "region": None, "status": None}
    (n,) = best_cut_findings(_summary(none, _cell(24, "late", "ruled out")))
    assert "no single fixed cut lowers the loss on the selection windows" in n
    assert best_cut_findings({}) == []
