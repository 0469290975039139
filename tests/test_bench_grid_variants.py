"""benchmarks/bench_grid_variants.py: each variant's ratio is to the baseline of the same round, so a
load that rises from round to round cancels; a name outside the grid is refused with the known ones."""
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _module():
    spec = importlib.util.spec_from_file_location("bench_grid_variants", ROOT / "benchmarks" / "bench_grid_variants.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_grid_variants"] = mod
    spec.loader.exec_module(mod)
    return mod


bg = _module()


def test_ratios_are_taken_within_a_round():
    # the machine halves its speed in round 1; the cut is 0.9x the baseline in both rounds
    runs = [{"variant": "baseline", "round": 0, "tokens_per_s": 1000.0},
            {"variant": "cut", "round": 0, "tokens_per_s": 900.0},
            {"variant": "cut", "round": 1, "tokens_per_s": 450.0},
            {"variant": "baseline", "round": 1, "tokens_per_s": 500.0}]
    r = bg.ratios(runs)
    assert r["cut"]["ratio_to_baseline"] == pytest.approx(0.9) and r["cut"]["ratio_min"] == pytest.approx(0.9)
    assert r["baseline"]["ratio_to_baseline"] == 1.0 and r["cut"]["runs"] == 2
    assert r["cut"]["tokens_per_s"] == pytest.approx(675.0)  # the raw rates still show the load


def test_unknown_variants_and_a_missing_baseline_are_refused():
    with pytest.raises(SystemExit, match="not in the smoke grid; known:"):
        bg.main(["--profile", "smoke", "--variants", "baseline", "no-such-variant"])
    with pytest.raises(SystemExit, match="must include baseline"):
        bg.main(["--profile", "smoke", "--variants", "learned"])
