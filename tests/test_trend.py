"""analysis.trend: the least-squares line of a measure against log10(tokens) (exact lines recovered, a
missing value left out, no line below two budgets, non-positive budgets refused) and the budget at which
it reaches a target (the analytic budget on an approaching line, a target already reached is measured,
a line moving away reaches nothing, targets below and above the last point alike). Pure and fast."""
import math

import pytest

from residshift.analysis import trend
import numpy as np
from residshift.analysis.trend import budget_to_reach, fit_trend

BUDGETS = [1e3, 4e3, 1.6e4, 6.4e4]


def line(a, b, tokens=BUDGETS):
    return [a + b * math.log10(t) for t in tokens]


# ---- fit_trend -----------------------------------------------------------------------------------


@pytest.mark.parametrize("a, b", [(1.4, -0.2), (-0.3, 0.15), (0.7, 0.0)])
def test_an_exact_line_is_recovered(a, b):
    t = fit_trend(BUDGETS, line(a, b))
    assert t.slope == pytest.approx(b, abs=1e-12) and t.intercept == pytest.approx(a, abs=1e-12)
    assert t.n == 4 and t.tokens == tuple(BUDGETS) and t.values == pytest.approx(line(a, b))
    assert t.residual_sd == pytest.approx(0.0, abs=1e-12) and t.why == ""
    assert t.at(1e5) == pytest.approx(a + 5 * b)
    d = t.as_dict()
    assert d["tokens"] == BUDGETS and d["slope"] == t.slope and d["n"] == 4


def test_two_points_give_a_line_without_a_residual_sd():
    t = fit_trend([100, 1000], [0.9, 0.7])
    assert t.slope == pytest.approx(-0.2) and t.intercept == pytest.approx(1.3) and t.n == 2
    assert t.residual_sd is None


def test_the_residual_sd_of_a_noisy_line():
    ys = [0.9, 0.8, 0.75]
    t = fit_trend([1e2, 1e3, 1e4], ys)
    fitted = [t.at(x) for x in (1e2, 1e3, 1e4)]
    sd = math.sqrt(sum((y - f) ** 2 for y, f in zip(ys, fitted)) / (3 - 2))
    assert t.residual_sd == pytest.approx(sd) and t.residual_sd > 0
    assert t.slope == pytest.approx(-0.075)  # (0.75 - 0.9) / 2 decades


@pytest.mark.parametrize("missing", [None, float("nan")])
def test_a_missing_value_is_left_out(missing):
    values = line(1.0, -0.1)
    values[1] = missing
    t = fit_trend(BUDGETS, values)
    assert t.n == 3 and t.tokens == (BUDGETS[0], BUDGETS[2], BUDGETS[3])
    assert t.slope == pytest.approx(-0.1) and t.intercept == pytest.approx(1.0)


@pytest.mark.parametrize("tokens, values", [
    ([], []),
    ([1000], [0.8]),
    ([1000, 1000], [0.8, 0.7]),  # two points, one budget
    ([1000, 4000], [0.8, None]),  # the second missing
])
def test_fewer_than_two_budgets_give_no_line_and_say_why(tokens, values):
    t = fit_trend(tokens, values)
    assert t.slope is None and t.intercept is None and t.residual_sd is None and t.at(1e6) is None
    assert t.why and str(trend.MIN_POINTS) in t.why
    b = budget_to_reach(t, 0.5)
    assert b == {"target": 0.5, "tokens": None, "kind": None, "why": t.why}


@pytest.mark.parametrize("bad", [0, -1000])
def test_non_positive_tokens_are_refused(bad):
    with pytest.raises(ValueError, match="positive"):
        fit_trend([bad, 1000, 4000], [0.9, 0.8, 0.7])


# ---- budget_to_reach -----------------------------------------------------------------------------


def test_a_falling_line_is_extrapolated_to_the_analytic_budget():
    a, b = 1.6, -0.2  # 1.0 at 1e3 ... 0.64 at 6.4e4
    t = fit_trend(BUDGETS, line(a, b))
    got = budget_to_reach(t, 0.5)
    assert got["kind"] == "extrapolated" and got["target"] == 0.5 and "extrapolated" in got["why"]
    assert got["tokens"] == pytest.approx(10 ** ((0.5 - a) / b), rel=1e-9) == pytest.approx(10 ** 5.5, rel=1e-9)
    assert got["tokens"] > max(BUDGETS)


def test_a_target_already_reached_is_measured_at_the_first_such_budget():
    # the target lies below the last point, which a point before it already reached (a bump)
    t = fit_trend(BUDGETS, [0.9, 0.45, 0.5, 0.55])
    assert budget_to_reach(t, 0.5) == {"target": 0.5, "tokens": BUDGETS[1], "kind": "measured", "why": ""}
    # reached exactly counts as reached
    assert budget_to_reach(t, 0.45) == {"target": 0.45, "tokens": BUDGETS[1], "kind": "measured", "why": ""}


def test_a_target_the_last_point_has_passed_is_measured_where_it_was_first_passed():
    t = fit_trend(BUDGETS, [0.9, 0.6, 0.45, 0.4])  # S1 falls below the 0.5 threshold at the third rung
    assert budget_to_reach(t, 0.5) == {"target": 0.5, "tokens": BUDGETS[2], "kind": "measured", "why": ""}


@pytest.mark.parametrize("values, target", [
    ([0.6, 0.65, 0.7, 0.75], 0.5),  # rising, the target below: moving away
    ([0.75, 0.7, 0.65, 0.6], 0.9),  # falling, the target above: moving away
])
def test_a_line_moving_away_reaches_no_budget_and_says_why(values, target):
    t = fit_trend(BUDGETS, values)
    got = budget_to_reach(t, target)
    assert got["tokens"] is None and got["kind"] is None and got["target"] == target
    assert "moves away" in got["why"] and f"{target:g}" in got["why"]


def test_a_rising_target_is_reached_alike():
    a, b = 0.1, 0.1  # 0.4 at 1e3 ... 0.58 at 6.4e4
    t = fit_trend(BUDGETS, line(a, b))
    got = budget_to_reach(t, 0.8)
    assert got["kind"] == "extrapolated" and got["tokens"] == pytest.approx(10 ** 7, rel=1e-9)
    # a target above the last point that a measured point already reaches: measured there
    bumpy = fit_trend(BUDGETS, [0.5, 0.7, 0.55, 0.6])
    assert budget_to_reach(bumpy, 0.65) == {"target": 0.65, "tokens": BUDGETS[1], "kind": "measured", "why": ""}
    # the mirror image of a falling line reaches the mirrored target at the same budget
    down = budget_to_reach(fit_trend(BUDGETS, line(-a, -b)), -0.8)
    assert down["kind"] == "extrapolated" and down["tokens"] == pytest.approx(got["tokens"], rel=1e-9)


@pytest.mark.parametrize("values", [[0.70, 0.7001, 0.6999], [0.7, 0.7, 0.7]])
def test_a_nearly_flat_line_gives_an_answer_not_an_overflow(values):
    got = budget_to_reach(fit_trend(BUDGETS[:3], values), 0.5)
    assert got["kind"] in (None, "extrapolated") and got["why"]


def test_the_budget_interval_brackets_the_point_budget_and_opens_when_the_line_can_be_flat():
    from residshift.analysis.trend import budget_interval, tokens_text

    rng = np.random.default_rng(0)
    budgets = [1e5, 4e5, 1.6e6]
    shares = [0.8, 0.6, 0.4]  # falling 0.332 per decade: 0.2 at about 6.4e6 tokens
    final = [rng.uniform(0.2, 0.4, 200) for _ in budgets]
    # window noise in the ratio (without it every resample returns the point and the interval has no width)
    early = [f * s * rng.uniform(0.8, 1.2, 200) for f, s in zip(final, shares)]
    point = budget_to_reach(fit_trend(budgets, [e.mean() / f.mean() for e, f in zip(early, final)]), 0.2)["tokens"]
    iv = budget_interval(budgets, early, final, 0.2, n_boot=200)
    assert iv["lo"] < point < iv["hi"] and iv["never"] == 0.0
    noisy = [rng.uniform(0, 1, 5) * s for s in (0.5, 0.5, 0.5)]  # flat line, 5 windows: often never
    iv = budget_interval(budgets, noisy, [np.ones(5)] * 3, 0.1, n_boot=200)
    assert iv["hi"] is None and iv["never"] > 0.025
    assert [tokens_text(n) for n in (358_400, 5_734_400, 4.85e8, 1.2e9, 9.2e13)] == ["358k", "5.73M", "485M", "1.2B",
                                                                                    "9.2e+13"]
