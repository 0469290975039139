"""The mitigation on one rung of the scale ladder (study.mitigation): the arms' configurations and run
folders, the declared rung (choose_rung) and seed count (seed_plan) on hand-made numbers, the comparison
at smoke (pilot, plan, planned seeds; the ladder's run reused as seed ladder_seed's baseline; a finished
record trains nothing; a foreign record is refused and left alone; an interrupted run resumes to the
uninterrupted one's seeds and losses; the hours left cap the count), and notebook 10's verdicts with
their scale clause, figure numbers, lines and record loading.

Every test writes under tmp_path (RESIDSHIFT_RESULTS / RESIDSHIFT_BUILD and the records folder); the
smoke tokenizer and token caches are the shared ones (data/cache, as tests/conftest.py keeps them)."""
import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as the CLI: a shared CPU runs sleeping threads faster

import dataclasses  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import shutil  # noqa: E402
import time  # noqa: E402
import types  # noqa: E402

import matplotlib  # noqa: E402

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from residshift.analysis import scale, stats, verdicts as V  # noqa: E402
from residshift.core import profiles  # noqa: E402
from residshift.study import ladder as L, mitigation as M  # noqa: E402
from residshift.train import trainer as T  # noqa: E402

from ladder_support import no_training, rung, use_folders  # noqa: E402


@pytest.fixture()
def P():
    return profiles.resolve("smoke")


_use = use_folders


@pytest.fixture()
def results(tmp_path, monkeypatch):
    """Results and build folders of this test's own."""
    return _use(monkeypatch, tmp_path)


_rung = rung


def _no_training(monkeypatch):
    no_training(monkeypatch, (M, "run_seed"))


def _key(cfg):
    return T.run_dir_for(cfg, "cpu").name.rsplit("-", 1)[1]


# ---- the arms ------------------------------------------------------------------------------------


def test_arm_config_baseline_late_cut_and_learned(P):
    rung = _rung(P, "6x32-r1")
    ladder_cfg = L.config(P, rung)[0]
    base = M.arm_config(P, rung, "baseline", 2)
    assert base == ladder_cfg.with_(seed=2) and base.mode == "baseline"
    assert M.arm_config(P, rung, "baseline", P.ladder_seed) == ladder_cfg

    cut = M.arm_config(P, rung, "late cut", 2)
    assert (cut.mode, cut.alpha, cut.alpha_layers, cut.site, cut.seed) == (
        "fixed", float(P.ladder_mitigation_alpha), (rung.depth - 1,), P.train_cut_site, 2)
    assert cut.with_(mode="baseline", alpha=None, alpha_layers=None, site=base.site) == base  # nothing else differs

    learned = M.arm_config(P, rung, "learned", 2)
    assert learned.mode == "learned" and learned.theta_init == float(P.train_gate_init) and learned.seed == 2
    assert learned.gate_lr == P.train_gate_lr
    assert learned.with_(mode="baseline", theta_init=None) == base
    P.train_gate_init = None
    assert M.arm_config(P, rung, "learned", 2).theta_init is None

    with pytest.raises(ValueError) as err:
        M.arm_config(P, rung, "gates", 0)
    assert "'gates'" in str(err.value) and all(a in str(err.value) for a in M.ARMS)


def test_arm_folder_seed_zero_baseline_is_the_ladders_run(P, results):
    rung = _rung(P, "6x32-r1")
    for arm in M.ARMS:
        for seed in (P.ladder_seed, P.ladder_seed + 1):
            cfg = M.arm_config(P, rung, arm, seed)
            name = T.run_dir_for(cfg, "cpu").name
            got = M.arm_folder(P, rung, arm, seed, cfg, "cpu")
            if arm == "baseline" and seed == P.ladder_seed:
                assert got == L.run_folder(P, rung, name) == results / "ladder" / "smoke" / "6x32-r1" / name
            else:
                assert got == results / "ladder" / "smoke" / "mitigation-6x32-r1" / name
    assert not (results / "ladder").exists()  # nothing made


# ---- the rung ------------------------------------------------------------------------------------


def _row(rung, tokens, S1, *, final=True, outcome=scale.NEAR_BIGRAM):
    shape, k = rung.split("-r")
    depth, width = (int(v) for v in shape.split("x"))
    return {"rung": rung, "shape": shape, "depth": depth, "width": width, "k": int(k), "tokens": tokens,
            "final": final, "S1": S1, "S1_lo": None, "S1_hi": None, "middle": V.NOT_REPRODUCED, "outcome": outcome,
            "why": "", "departure_depth": None, "top1_next_h1": 0.1, "top1_next_hL": 0.2, "loss": 5.0,
            "row": {"model": rung}}


def _costs(spec):
    """{rung: (tokens, tokens_per_s)} as cost_table's columns."""
    return pd.DataFrame({"rung": list(spec), "tokens": [t for t, _ in spec.values()],
                         "tokens_per_s": [s for _, s in spec.values()]}).set_index("rung")


def _hours(P, tokens, tps):
    return (P.ladder_mitigation_pilot * 3 - 1) * tokens / tps / 3600 * L.OVERHEAD


def test_pilot_hours_arithmetic(P):
    costs = _costs({"6x32-r1": (4000, 20.0), "5x32-r1": (4000, 0.0), "5x32-r2": (16000, np.nan)})
    assert M.pilot_hours(P, "6x32-r1", costs) == pytest.approx(5 * 4000 / 20 / 3600 * L.OVERHEAD)  # 2 seeds x 3 - 1
    P.ladder_mitigation_pilot = 3
    assert M.pilot_hours(P, "6x32-r1", costs) == pytest.approx(8 * 4000 / 20 / 3600 * L.OVERHEAD)
    assert M.pilot_hours(P, "5x32-r1", costs) is None  # unmeasured speed
    assert M.pilot_hours(P, "7x32-r0", costs) is None  # not in the table


def test_choose_rung_the_largest_deep_switch_whose_pilot_fits(P):
    D = scale.DEEP_SWITCH
    rows = [_row("6x32-r2", 16000, 0.40, outcome=D),  # the largest: its pilot does not fit
            _row("6x32-r1", 4000, 0.45, outcome=D),  # chosen: equal budget, deeper than 5x32-r1
            _row("5x32-r1", 4000, 0.30, outcome=D),
            _row("5x32-r0", 1000, 0.05),  # the lowest S1, but no deep switch
            _row("6x32-r3", 64000, 0.2, final=False, outcome=D),  # a reading mid-run: not a finished rung
            _row("5x32-r2", 16000, None, outcome=D)]  # no S1: left out
    costs = _costs({"6x32-r2": (16000, 20.0), "6x32-r1": (4000, 20.0), "5x32-r1": (4000, 20.0),
                    "5x32-r0": (1000, 20.0), "6x32-r3": (64000, 1e9), "5x32-r2": (16000, 1e9)})
    assert P.ladder_mitigation_hours == 0.5 and _hours(P, 16000, 20) > 0.5 >= _hours(P, 4000, 20)
    got = M.choose_rung(rows, costs, P)
    assert got == {"rung": "6x32-r1", "has_switch": True, "S1": 0.45, "hours": pytest.approx(_hours(P, 4000, 20)),
                   "why": "the largest finished rung with the deep switch whose pilot fits in ladder_mitigation_hours",
                   "left_out": [{"rung": "6x32-r2", "pilot_hours": pytest.approx(_hours(P, 16000, 20))}]}
    # the deeper rung of the same budget too slow: the shallower one, both larger ones listed
    slow = _costs({"6x32-r2": (16000, 20.0), "6x32-r1": (4000, 1.0), "5x32-r1": (4000, 20.0)})
    got = M.choose_rung(rows, slow, P)
    assert got["rung"] == "5x32-r1" and [x["rung"] for x in got["left_out"]] == ["6x32-r2", "6x32-r1"]
    assert got["left_out"][1]["pilot_hours"] == pytest.approx(_hours(P, 4000, 1.0))
    # a deep-switch rung missing from the cost table is listed with no hours
    got = M.choose_rung(rows, _costs({"6x32-r1": (4000, 20.0)}), P)
    assert got["rung"] == "6x32-r1" and got["left_out"] == [{"rung": "6x32-r2", "pilot_hours": None}]


def test_choose_rung_without_a_deep_switch_the_lowest_share_that_fits(P):
    rows = [_row("6x32-r2", 16000, 0.30), _row("5x32-r1", 4000, 0.70), _row("6x32-r1", 4000, 0.50),
            _row("5x32-r0", 1000, 0.10, final=False)]
    costs = _costs({"6x32-r2": (16000, 20.0), "5x32-r1": (4000, 20.0), "6x32-r1": (4000, 20.0),
                    "5x32-r0": (1000, 20.0)})
    got = M.choose_rung(rows, costs, P)
    assert got["rung"] == "6x32-r1" and got["has_switch"] is False and got["S1"] == 0.5
    assert got["hours"] == pytest.approx(_hours(P, 4000, 20))
    assert got["why"] == "no finished rung has the deep switch: the lowest early share whose pilot fits"
    assert got["left_out"] == [{"rung": "6x32-r2", "pilot_hours": pytest.approx(_hours(P, 16000, 20))}]


def test_choose_rung_nothing_fits_or_nothing_finished(P):
    D = scale.DEEP_SWITCH
    rows = [_row("6x32-r1", 4000, 0.45, outcome=D), _row("5x32-r1", 4000, 0.3, outcome=D), _row("5x32-r0", 1000, 0.1)]
    costs = _costs({"6x32-r1": (4000, 20.0), "5x32-r1": (4000, 20.0), "5x32-r0": (1000, 1e9)})
    P.ladder_mitigation_hours = 0.01
    got = M.choose_rung(rows, costs, P)
    # the deep-switch rungs are the candidates: a near-bigram one that fits is not taken instead
    assert got["rung"] is None and got["has_switch"] is True and got["S1"] is None and got["hours"] is None
    assert got["why"] == "no candidate's pilot fits in ladder_mitigation_hours=0.01"
    assert [x["rung"] for x in got["left_out"]] == ["6x32-r1", "5x32-r1"]
    assert all(x["pilot_hours"] == pytest.approx(_hours(P, 4000, 20)) for x in got["left_out"])
    plain = [_row("5x32-r1", 4000, 0.7), _row("6x32-r1", 4000, 0.5)]
    got = M.choose_rung(plain, costs, P)
    assert got["rung"] is None and got["has_switch"] is False and [x["rung"] for x in got["left_out"]] == [
        "6x32-r1", "5x32-r1"]
    assert M.choose_rung([_row("6x32-r1", 4000, 0.45, final=False, outcome=D), _row("5x32-r1", 4000, None)], costs,
                         P) is None
    assert M.choose_rung([], costs, P) is None


# ---- the seed count ------------------------------------------------------------------------------


def _spread(sd, mean=-0.01):
    """Three paired differences with standard deviation ``sd`` (ddof 1)."""
    return [mean - sd, mean, mean + sd]


def _mde(sd, n):
    return stats.mde_paired_mean(sd, n, alpha=V.TEST_ALPHA, power=V.POWER, sided="two")


def test_seed_plan_the_smallest_count_whose_mde_reaches_the_margin(P):
    P.ladder_mitigation_max_seeds = 10
    sd = 0.0027
    want = next(n for n in range(3, 11) if _mde(sd, n) <= V.LOSS_MARGIN)
    assert want == 5  # a count above the pilot's: the test means something
    for diffs in ({"late cut": _spread(0.001), "learned": _spread(sd)},
                  {"late cut": _spread(sd), "learned": _spread(0.001, mean=0.02)}):  # the larger sd, either arm
        plan = M.seed_plan(diffs, P, hours_per_seed=None, hours_left=None)
        assert plan["pilot_seeds"] == 3 and plan["sd"] == pytest.approx(sd)
        assert plan["pilot_sd"] == {a: pytest.approx(float(np.std(d, ddof=1))) for a, d in diffs.items()}
        assert plan["margin"] == V.LOSS_MARGIN and plan["n_seeds"] == 5
        assert list(plan["mde_by_n"]) == [str(n) for n in range(3, 11)]
        assert all(plan["mde_by_n"][str(n)] == pytest.approx(_mde(sd, n)) for n in range(3, 11))
        assert plan["mde"] == plan["mde_by_n"]["5"] <= V.LOSS_MARGIN < plan["mde_by_n"]["4"]
        assert plan["why"] == f"the smallest count whose MDE is at most the {V.LOSS_MARGIN:g}-nat margin"
        assert json.loads(json.dumps(plan)) == plan
    # a spread small enough for the pilot itself: the pilot's count
    plan = M.seed_plan({"late cut": _spread(1e-5), "learned": _spread(1e-5)}, P, hours_per_seed=None,
                       hours_left=None)
    assert plan["n_seeds"] == 3
    # a pilot of two: the MDE from two seeds on
    plan = M.seed_plan({"late cut": [0.0, 0.001], "learned": [0.0, 0.002]}, P, hours_per_seed=None, hours_left=None)
    assert plan["pilot_seeds"] == 2 and list(plan["mde_by_n"])[0] == "2"
    assert plan["sd"] == pytest.approx(float(np.std([0.0, 0.002], ddof=1)))


def test_seed_plan_a_large_spread_takes_the_most_seeds_and_the_hours_cap_the_count(P):
    P.ladder_mitigation_max_seeds = 10
    diffs = {"late cut": _spread(0.1), "learned": _spread(0.05)}
    plan = M.seed_plan(diffs, P, hours_per_seed=None, hours_left=None)
    assert plan["n_seeds"] == 10 and plan["mde"] == plan["mde_by_n"]["10"] > V.LOSS_MARGIN
    assert plan["why"] == (f"no count up to 10 seeds (ladder_mitigation_max_seeds=10, at least the pilot's 3) reaches "
                           f"the {V.LOSS_MARGIN:g}-nat margin")
    # the hours left allow 2 more seeds than the pilot's 3
    plan = M.seed_plan(diffs, P, hours_per_seed=1.0, hours_left=2.5)
    assert plan["n_seeds"] == 5 and plan["mde"] == plan["mde_by_n"]["5"]
    assert plan["why"].startswith("no count up to") and plan["why"].endswith("; the hours left (2.50 h) allow 5")
    # never below the pilot
    for left in (0.5, 0.0, -3.0):
        plan = M.seed_plan(diffs, P, hours_per_seed=1.0, hours_left=left)
        assert plan["n_seeds"] == 3 and plan["mde"] == plan["mde_by_n"]["3"] and "allow 3" in plan["why"]
    # hours that allow more than needed change nothing; no measured time per seed: no cap
    assert M.seed_plan(diffs, P, hours_per_seed=1.0, hours_left=100.0)["n_seeds"] == 10
    assert M.seed_plan(diffs, P, hours_per_seed=None, hours_left=0.0)["n_seeds"] == 10
    small = {"late cut": _spread(0.0027), "learned": _spread(0.001)}
    plan = M.seed_plan(small, P, hours_per_seed=1.0, hours_left=5.0)
    assert plan["n_seeds"] == 5 and "hours left" not in plan["why"]


def test_seed_plan_a_maximum_below_the_pilot_is_refused_or_keeps_the_pilot(P):
    P.ladder_mitigation_max_seeds = 2
    try:
        plan = M.seed_plan({"late cut": _spread(0.1), "learned": _spread(0.1)}, P, hours_per_seed=None,
                           hours_left=None)
    except ValueError as err:
        assert "ladder_mitigation_max_seeds" in str(err)
        return
    assert plan["n_seeds"] >= 3 and plan["mde"] is not None


# ---- the comparison at smoke ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """The smoke ladder trained, a copy of it (before the mitigation), then the mitigation in one call."""
    root = tmp_path_factory.mktemp("mitigation-smoke")
    snap = tmp_path_factory.mktemp("ladder-snapshot")
    with pytest.MonkeyPatch.context() as mp:
        _use(mp, root)
        P = profiles.resolve("smoke")
        L.run_ladder(P, progress=False, log=lambda _: None, device="cpu")
        shutil.copytree(root / "results" / "ladder", snap / "results" / "ladder")
        shutil.copytree(root / "build" / "smoke" / "ladder", snap / "build" / "smoke" / "ladder")
        recs = L.load_records(P)
        choice = M.choose_rung(L.reading_rows(recs, P), L.cost_table(recs), P)
        lines = []
        returned = M.run_mitigation(P, device="cpu", progress=False, log=lines.append)
    path = root / "build" / "smoke" / "ladder" / f"mitigation-{returned['rung']}.json"
    return types.SimpleNamespace(root=root, snap=snap, rec=json.loads(path.read_text()), returned=returned, path=path,
                                 lines=lines, choice=choice, ladder=recs)


def _snapshot_into(smoke, tmp_path):
    shutil.copytree(smoke.snap, tmp_path, dirs_exist_ok=True)


def _losses(rec):
    return {(s, a): rec["seeds"][s][a]["losses"] for s in rec["seeds"] for a in M.ARMS}


def test_the_comparison_trains_the_pilot_declares_the_count_then_the_rest(smoke, P, monkeypatch):
    rec, choice = smoke.rec, smoke.choice
    assert choice is not None and choice["rung"] is not None
    assert rec["kind"] == M.KIND and rec["rung"] == choice["rung"] and rec["choice"] == json.loads(json.dumps(choice))
    assert rec["finished"] and rec["arms"] == list(M.ARMS) and rec["profile"] == "smoke"
    assert json.loads(json.dumps(smoke.returned)) == rec  # what it returns is what it wrote (as JSON)
    plan = rec["plan"]
    n = plan["n_seeds"]
    assert plan["pilot_seeds"] == P.ladder_mitigation_pilot <= n <= P.ladder_mitigation_max_seeds
    assert sorted(rec["seeds"], key=int) == [str(P.ladder_seed + i) for i in range(n)]
    # the plan is the pilot's: recomputed from the pilot seeds' paired differences
    pilot = {"seeds": {s: rec["seeds"][s] for s in map(str, range(P.ladder_mitigation_pilot))}}
    diffs = M._diffs(pilot)
    again = M.seed_plan(diffs, P, hours_per_seed=None, hours_left=None)
    assert plan["sd"] == pytest.approx(max(np.std(d, ddof=1) for d in diffs.values()))
    assert (again["pilot_seeds"], again["n_seeds"]) == (plan["pilot_seeds"], n)
    assert (again["sd"], again["mde"]) == pytest.approx((plan["sd"], plan["mde"]))
    assert again["mde_by_n"] == pytest.approx(plan["mde_by_n"])
    assert plan["mde"] == plan["mde_by_n"][str(n)]
    # the log: the pilot's seeds, the declared count, then the remaining seeds
    assert len(smoke.lines) == n + 1 and all(x.startswith(f"mitigation {rec['rung']}: ") for x in smoke.lines)
    done = [x.split(": ", 1)[1].split(" (")[0] for x in smoke.lines[:2] + smoke.lines[3:]]
    assert done == [f"seed {s} done" for s in range(n)]
    assert smoke.lines[2] == (f"mitigation {rec['rung']}: pilot sd {plan['sd']:.4f} nats -> {n} seeds, MDE "
                              f"{plan['mde']:.4f} nats ({plan['why']})")
    # every arm of every seed: its key, per-window losses (the same windows across arms)
    rung = _rung(P, rec["rung"])
    for s, per in rec["seeds"].items():
        sizes = {len(per[a]["losses"]) for a in M.ARMS}
        assert len(sizes) == 1 and sizes.pop() > 0
        assert all(np.isfinite(per[a]["losses"]).all() for a in M.ARMS)
        assert set(per["baseline_lens"]) >= {"top1_input", "top1_next", "unigram_input", "unigram_next"}
        assert per["seconds"] > 0
        for arm in M.ARMS:
            with monkeypatch.context() as mp:
                _use(mp, smoke.root)
                cfg = M.arm_config(P, rung, arm, int(s))
                assert per[arm]["key"] == _key(cfg)
                folder = M.arm_folder(P, rung, arm, int(s), cfg, "cpu")
            assert folder.name.endswith(per[arm]["key"]) and (folder / "summary.json").is_file()
            assert T.read_summary(folder)["key"] == per[arm]["key"]
    assert rec["configs"]["late cut"]["alpha_layers"] == [rung.depth - 1]


def test_seed_zero_baseline_is_the_ladders_run_not_retrained(smoke, P):
    rec = smoke.rec
    ladder = smoke.ladder[rec["rung"]]
    assert rec["seeds"][str(P.ladder_seed)]["baseline"]["key"] == ladder["key"].rsplit("-", 1)[1]
    run = smoke.root / "results" / "ladder" / "smoke" / rec["rung"] / ladder["key"]
    assert (run / "summary.json").is_file()
    folder = smoke.root / "results" / "ladder" / "smoke" / f"mitigation-{rec['rung']}"
    names = sorted(p.name for p in folder.iterdir())
    assert not [x for x in names if x.startswith(f"baseline-s{P.ladder_seed}-")]
    n = len(rec["seeds"])
    assert len([x for x in names if x.startswith("baseline-")]) == n - 1
    assert len([x for x in names if x.startswith("fixed-")]) == n == len([x for x in names if x.startswith("learned-")])
    # the ladder's run is untouched: its log trained every step once, its record still finished
    steps = [r["step"] for r in T.read_log(run) if "loss" in r]
    assert len(steps) == len(set(steps))
    assert L.read_record(smoke.root / "build" / "smoke" / "ladder" / f"{rec['rung']}.json", ladder["key"])["finished"]


def test_a_finished_comparison_trains_nothing_again(smoke, P, monkeypatch):
    _use(monkeypatch, smoke.root)
    before = smoke.path.read_bytes()
    folders = sorted(p for p in (smoke.root / "results" / "ladder").rglob("*") if p.is_dir())
    _no_training(monkeypatch)
    monkeypatch.setattr(M, "seed_plan", lambda *a, **k: pytest.fail("the plan was declared again"))
    lines = []
    rec = M.run_mitigation(P, device="cpu", progress=False, log=lines.append)
    assert rec == json.loads(before)
    assert json.loads(smoke.path.read_bytes()) == json.loads(before) and smoke.path.read_bytes() == before
    assert lines == [f"mitigation {rec['rung']}: every planned seed is recorded in {smoke.path}: nothing to train"]
    assert sorted(p for p in (smoke.root / "results" / "ladder").rglob("*") if p.is_dir()) == folders


def test_a_record_of_other_code_is_refused_and_left_alone(smoke, P, tmp_path, results, monkeypatch):
    out = tmp_path / "records"
    out.mkdir()
    path = out / smoke.path.name
    rec = json.loads(smoke.path.read_text())
    real = rec["seeds"]["1"]["late cut"]["key"]
    rec["seeds"]["1"]["late cut"]["key"] = "0123456789abcdef0123"
    path.write_text(json.dumps(rec))
    before = path.read_bytes()
    _no_training(monkeypatch)
    with pytest.raises(L.LadderError) as err:
        M.run_mitigation(P, out=out, device="cpu", progress=False, log=lambda _: None)
    msg = str(err.value)
    assert "move it away or delete it" in msg and "0123456789abcdef0123" in msg and real in msg
    assert "seed 1 of 'late cut'" in msg and str(path) in msg
    assert path.read_bytes() == before and sorted(p.name for p in out.iterdir()) == [path.name]
    assert not (results / "ladder").exists()
    # named on the command line: the same
    with pytest.raises(L.LadderError, match="move it away or delete it"):
        M.run_mitigation(P, rung_name=rec["rung"], out=out, device="cpu", progress=False, log=lambda _: None)
    # a file of another kind at the rung's record path
    path.write_text(json.dumps({"kind": "residshift-ladder/1", "rung": rec["rung"]}))
    before = path.read_bytes()
    with pytest.raises(L.LadderError, match="is not a readable mitigation record .*: move it away or delete it"):
        M.run_mitigation(P, rung_name=rec["rung"], out=out, device="cpu", progress=False, log=lambda _: None)
    assert path.read_bytes() == before


@pytest.mark.parametrize("text", ["not json {", json.dumps({"kind": "residshift-train/1"})])
def test_a_garbled_record_is_refused_naming_the_fix_when_no_rung_is_named(P, tmp_path, results, monkeypatch, text):
    out = tmp_path / "records"
    out.mkdir()
    path = out / "mitigation-6x32-r1.json"
    path.write_text(text)
    _no_training(monkeypatch)
    try:
        with pytest.raises(L.LadderError, match="move it away or delete it"):
            M.run_mitigation(P, out=out, device="cpu", progress=False, log=lambda _: None)
    finally:
        assert path.read_text() == text


def test_an_interrupted_comparison_resumes_to_the_uninterrupted_one(smoke, P, tmp_path, monkeypatch):
    _snapshot_into(smoke, tmp_path)
    _use(monkeypatch, tmp_path)
    real, calls, armed = M.run_seed, [], [True]

    def run_seed(*a, **k):
        calls.append(a[2])
        if armed[0] and len(calls) == 2:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(M, "run_seed", run_seed)
    with pytest.raises(KeyboardInterrupt):
        M.run_mitigation(P, device="cpu", progress=False, log=lambda _: None)
    path = tmp_path / "build" / "smoke" / "ladder" / smoke.path.name
    partial = json.loads(path.read_text())
    assert list(partial["seeds"]) == ["0"] and partial["plan"] is None and not partial.get("finished")
    assert partial["rung"] == smoke.rec["rung"]
    # notebook 10 reads it as unfinished and trains nothing there
    P.ladder_in_study = False
    lines = []
    assert M.for_notebook(P, log=lines.append) == partial
    assert lines[0].startswith(f"mitigation on {partial['rung']} (") and lines[0].endswith(
        ": 1 seeds; not finished (`make ladder` resumes it)")
    assert list(M.seed_table(partial).index) == [0]  # one seed: its row, no spread needed
    P.ladder_in_study = True

    armed[0] = False
    rec = M.run_mitigation(P, device="cpu", progress=False, log=lambda _: None)
    assert calls[2] == 1  # seed 0 was not trained again
    ref = smoke.rec
    assert sorted(rec["seeds"], key=int) == sorted(ref["seeds"], key=int) and rec["finished"]
    assert rec["plan"]["n_seeds"] == ref["plan"]["n_seeds"]
    assert rec["plan"]["sd"] == pytest.approx(ref["plan"]["sd"], rel=1e-9)
    got, want = _losses(rec), _losses(ref)
    assert got.keys() == want.keys()
    assert all(got[k] == pytest.approx(want[k], rel=1e-9, abs=1e-12) for k in want)
    assert all(rec["seeds"][s][a]["key"] == ref["seeds"][s][a]["key"] for s in ref["seeds"] for a in M.ARMS)


def _fake_run_seed(P, clock, calls, *, kill_at=None):
    """run_seed without training: one hour on ``clock`` per seed, losses whose paired differences spread
    widely (no count reaches the margin), the keys this checkout gives the arms."""
    keys = {}

    def run_seed(P_, rung, seed, *, device, progress=False):
        calls.append(seed)
        if kill_at is not None and len(calls) == kill_at:
            clock[0] += 1800  # killed half-way through the seed
            raise KeyboardInterrupt
        clock[0] += 3600
        out = {}
        for arm in M.ARMS:
            if (arm, seed) not in keys:
                keys[arm, seed] = _key(M.arm_config(P_, rung, arm, seed))
            shift = 0.0 if arm == "baseline" else 0.2 * (-1) ** seed * (seed + 1)
            losses = [5.0 + shift, 5.2 + shift]
            out[arm] = {"key": keys[arm, seed], "val_loss": float(np.mean(losses)), "losses": losses, "alphas": {},
                        "train_seconds": 1.0, "tokens_per_s": 1.0, "learned": None}
        out["baseline_lens"] = {}
        return out

    return run_seed


def _fake_clock(monkeypatch, clock):
    monkeypatch.setattr(M, "time", types.SimpleNamespace(perf_counter=lambda: clock[0], strftime=time.strftime,
                                                         gmtime=time.gmtime))


def test_the_hours_left_after_the_pilot_cap_the_seed_count(P, tmp_path, results, monkeypatch):
    monkeypatch.setattr(M.ladder, "load_records", lambda P, out=None: {"6x32-r1": {"finished": True}})
    P.ladder_mitigation_max_seeds = 10
    clock, calls = [1000.0], []
    _fake_clock(monkeypatch, clock)
    monkeypatch.setattr(M, "run_seed", _fake_run_seed(P, clock, calls))
    monkeypatch.setattr(T, "train", lambda *a, **k: pytest.fail("trained"))
    lines = []
    rec = M.run_mitigation(P, rung_name="6x32-r1", out=tmp_path / "records", device="cpu", hours=3.5,
                           log=lines.append)
    # the pilot took 2 h of 3.5: 1.5 h left at 1 h a seed allow one more seed
    assert calls == [0, 1, 2] and sorted(rec["seeds"], key=int) == ["0", "1", "2"] and rec["finished"]
    assert rec["plan"]["n_seeds"] == 3 and rec["plan"]["why"].endswith("; the hours left (1.50 h) allow 3")
    assert rec["choice"] == {"rung": "6x32-r1", "why": "named on the command line"}
    assert [x.split(": ", 1)[1] for x in lines if "done" in x] == [f"seed {s} done (3600 s)" for s in (0, 1, 2)]


def test_an_interrupted_pilot_plans_the_seed_count_of_the_uninterrupted_one(P, tmp_path, results, monkeypatch):
    monkeypatch.setattr(M.ladder, "load_records", lambda P, out=None: {"6x32-r1": {"finished": True}})
    P.ladder_mitigation_max_seeds = 10
    clock, calls = [1000.0], []
    _fake_clock(monkeypatch, clock)
    monkeypatch.setattr(T, "train", lambda *a, **k: pytest.fail("trained"))
    monkeypatch.setattr(M, "run_seed", _fake_run_seed(P, clock, calls, kill_at=2))
    out = tmp_path / "records"
    with pytest.raises(KeyboardInterrupt):
        M.run_mitigation(P, rung_name="6x32-r1", out=out, device="cpu", hours=3.5, log=lambda _: None)
    monkeypatch.setattr(M, "run_seed", _fake_run_seed(P, clock, calls))
    rec = M.run_mitigation(P, rung_name="6x32-r1", out=out, device="cpu", hours=3.5, log=lambda _: None)
    assert calls[:3] == [0, 1, 1]
    # uninterrupted, the same pilot leaves 1.5 h: 3 seeds (the test above)
    assert rec["plan"]["n_seeds"] == 3


def test_a_named_rung_the_ladder_has_not_finished_is_refused_or_left_readable(P, tmp_path, results, monkeypatch):
    real, calls = M.run_seed, []

    def run_seed(*a, **k):
        calls.append(a[2])
        if len(calls) == 2:
            raise KeyboardInterrupt  # seed 0 is enough to show it
        return real(*a, **k)

    monkeypatch.setattr(M, "run_seed", run_seed)
    records = tmp_path / "records"
    try:
        M.run_mitigation(P, rung_name="5x32-r0", out=records, device="cpu", log=lambda _: None)
    except L.LadderError:
        assert not (results / "ladder" / "smoke" / "5x32-r0").exists()
        return
    except KeyboardInterrupt:
        pass
    rec = L.run_rung(P, _rung(P, "5x32-r0"), records, device="cpu", progress=False, log=lambda _: None)
    assert rec["finished"]


# ---- notebook 10: the verdicts, the figure, the lines --------------------------------------------


def _per_seed_diffs(rec):
    seeds = sorted(rec["seeds"], key=int)
    return {arm: np.array([np.mean(rec["seeds"][s][arm]["losses"]) - np.mean(rec["seeds"][s]["baseline"]["losses"])
                           for s in seeds]) for arm in M.MITIGATIONS}


def test_verdict_rows_carry_the_scale_of_the_rungs_baselines(smoke, P, monkeypatch):
    rec = smoke.rec
    rows, scaled = M.verdict_rows(rec, P)
    assert all(isinstance(r, V.VerdictRow) for r in rows)
    assert [r.claim_id for r in rows] == [d["claim_id"] for d in scaled] == ["C2-training.late-cut",
                                                                            "C3-training.beats-baseline"]
    depth = int(rec["rung"].split("x")[0])
    assert rows[0].variant == f"block {depth - 1}, alpha={P.ladder_mitigation_alpha:g}"
    assert rows[1].variant == "learned" and all(r.model == f"trained GPT {rec['rung']}" for r in rows)
    d = _per_seed_diffs(rec)
    for row, arm in zip(rows, M.MITIGATIONS):
        t = V.seed_test(d[arm], sign=-1, margin=V.LOSS_MARGIN)
        assert row.estimate == pytest.approx(t["estimate"]) and row.n == len(rec["seeds"])
        assert list(row.ci) == pytest.approx([t["lo"], t["hi"]])
    sw = M.switch_row(rec, P)
    assert sw.unit == "seeds" and sw.n == len(rec["seeds"]) and sw.n_layers == depth
    assert sw.outcome != scale.DEEP_SWITCH  # smoke's tiny baselines do not have it
    for x in scaled:
        s = x["scale"]
        assert s["outcome"] == sw.outcome and s["counts_as_evidence"] is False and s["rule"] == scale.SCALE_RULE
        assert s["evidence"] == scale.evidence(x["verdict"], sw.outcome)
    # a rung whose baselines have the deep switch: its verdicts count as evidence
    deep = dataclasses.replace(sw, outcome=scale.DEEP_SWITCH, why="", middle=V.REPRODUCED)
    monkeypatch.setattr(M, "switch_row", lambda rec_, P_: deep)
    _, scaled = M.verdict_rows(rec, P)
    assert [x["scale"]["counts_as_evidence"] for x in scaled] == [True, True]
    assert [x["scale"]["evidence"] for x in scaled] == [scale.evidence(x["verdict"], scale.DEEP_SWITCH) for x in scaled]


def test_mitigation_panel_numbers_are_the_seed_tests_of_the_paired_differences(smoke, P):
    import matplotlib.pyplot as plt

    rec = smoke.rec
    fig, numbers = M.mitigation_panel(rec, P)
    try:
        assert isinstance(fig, matplotlib.figure.Figure)
    finally:
        plt.close(fig)
    assert numbers["seeds"] == sorted(int(s) for s in rec["seeds"]) and numbers["plan"] == rec["plan"]
    d = _per_seed_diffs(rec)
    assert list(numbers["arms"]) == list(M.MITIGATIONS)
    for arm in M.MITIGATIONS:
        t = V.seed_test(d[arm], sign=-1, margin=V.LOSS_MARGIN)
        got = numbers["arms"][arm]
        for k in ("estimate", "lo", "hi", "sd", "mde"):
            assert got[k] == pytest.approx(t[k]), k
        assert got["per_seed"] == pytest.approx(t["per_seed"]) and got["verdict"] == t["verdict"]
        assert got["why"] == t["why"] and "reach" not in got
        assert got["seeds_for_paper_effect"] == math.ceil(((1.959964 + 0.841621) * t["sd"] / math.log(28.62 / 28.46)) ** 2)
    table = M.seed_table(rec)
    assert numbers["baseline_S1"] == pytest.approx(list(table["S1"]))
    assert json.loads(json.dumps(numbers)) == numbers


def test_seed_table_each_seeds_baseline_share_and_paired_changes(smoke, P):
    rec = smoke.rec
    table = M.seed_table(rec)
    seeds = sorted(int(s) for s in rec["seeds"])
    assert list(table.index) == seeds and not hasattr(M, "mitigation_lines")
    assert list(table.columns) == ["top1 next h_1", "top1 next h_L", "S1"] + [f"{a} - baseline" for a in M.MITIGATIONS]
    d = _per_seed_diffs(rec)
    for arm in M.MITIGATIONS:
        assert list(table[f"{arm} - baseline"]) == pytest.approx(list(d[arm]))
    for s in seeds:
        t = np.asarray(rec["seeds"][str(s)]["baseline_lens"]["top1_next"])
        assert table.loc[s, "top1 next h_1"] == pytest.approx(t[:, 1].mean())
        assert table.loc[s, "S1"] == pytest.approx(t[:, 1].mean() / t[:, -1].mean())


def test_the_scale_of_each_mitigation_verdict_is_tabled_in_the_rules_words(smoke, P):
    _, scaled = M.verdict_rows(smoke.rec, P)
    table = scale.scale_table(scaled + [{"claim_id": "C1.early", "verdict": V.REPRODUCED}])  # unscaled rows: skipped
    assert len(table) == len(scaled) == 2
    s = scaled[0]["scale"]
    assert all(list(r.values())[4:6] == [s["model"], s["outcome"]] for r in table)
    assert not s["counts_as_evidence"] and all(r[scale.SCALE_COLUMNS[-2]] == "no" for r in table)


def test_an_undefined_share_leaves_the_verdicts_and_their_scale_readable(smoke, P, monkeypatch):
    rec = smoke.rec
    sw = M.switch_row(rec, P)
    undefined = dataclasses.replace(sw, early_share=None, early_share_ci=(None, None), outcome=scale.SWITCH_INCONCLUSIVE,
                                    why="no interval")
    monkeypatch.setattr(M, "switch_row", lambda rec_, P_: undefined)
    _, scaled = M.verdict_rows(rec, P)
    assert len(scaled) == 2 and all(x["scale"]["early_share"] is None for x in scaled)
    assert all(r[scale.SCALE_COLUMNS[6]].startswith("–") for r in scale.scale_table(scaled))


def test_for_notebook_reads_the_record_and_trains_nothing_outside_the_study(smoke, P, tmp_path, monkeypatch):
    _use(monkeypatch, tmp_path)
    P.ladder_in_study = False
    monkeypatch.setattr(M, "run_mitigation", lambda *a, **k: pytest.fail("ran the comparison"))
    _no_training(monkeypatch)
    lines = []
    assert M.for_notebook(P, log=lines.append) is None
    assert lines == ["no mitigation record at this profile yet: `make ladder` runs it after the rungs"]
    assert not (tmp_path / "results").exists() and not (tmp_path / "build").exists()
    # with the record: read and described from its plan
    _use(monkeypatch, smoke.root)
    lines = []
    rec = M.for_notebook(P, log=lines.append)
    plan = rec["plan"]
    assert rec == smoke.rec
    assert lines == [f"mitigation on {rec['rung']} ({rec['choice']['why']}): {len(rec['seeds'])} seeds; pilot sd "
                     f"{plan['sd']:.4f} nats, seed count {plan['n_seeds']} with MDE {plan['mde']:.4f} nats declared "
                     f"before the remaining seeds ran ({plan['why']})"]
    assert M.load(P) == rec and M.load(P, rec["rung"]) == rec and M.load(P, "5x32-r0") is None
