"""Issue 37: where the grid's training speed went (study.training's throughput functions), on crafted
run folders (summary.json and host.json written by hand, variants with known speeds)."""
import json

import numpy as np
import pytest

from residshift.study import training as study


def _run(folder, name, seed, tps, *, load=None, run_seconds=None, old=False):
    run = folder / f"{name}-s{seed}"
    run.mkdir(parents=True)
    tokens = 10_000
    summary = {"tokens_per_s": tps, "train_seconds": tokens / tps, "tokens": tokens, "device": "cpu"}
    if not old:  # summaries before run_seconds_last_call existed lack it
        summary.update(run_seconds_last_call=run_seconds or 1.25 * tokens / tps,
                       wall_seconds_last_call=(run_seconds or 1.25 * tokens / tps) + 2.0)
    (run / "summary.json").write_text(json.dumps(summary))
    if load is not None:
        (run / "host.json").write_text(json.dumps({"load_1min_start": load - 0.5, "load_1min_end": load + 0.5,
                                                   "threads": 2, "cpus": 2, "parallel_runs": 1}))
    return run


def test_variant_explains_the_whole_gap_when_seeds_agree(tmp_path):
    # two variants, three seeds each, no spread within a variant: the variant is the whole gap
    runs = {(v, s): _run(tmp_path, v, s, tps) for v, tps in (("fast", 1000.0), ("slow", 600.0)) for s in range(3)}
    t = study.throughput_numbers(study.throughput_runs(runs))
    assert t["best"] == 1000.0 and t["mean"] == pytest.approx(800.0) and t["share_of_best"] == pytest.approx(0.8)
    assert t["between_share"] == pytest.approx(1.0) and t["within_share"] == pytest.approx(0.0)
    assert t["variance_between_share"] == pytest.approx(1.0)
    assert t["per_variant"]["slow"] == {"mean": 600.0, "min": 600.0, "max": 600.0, "runs": 3}
    assert t["overhead_share"] == pytest.approx(0.2)  # run seconds 1.25 x training seconds
    assert t["load"] == {"runs": 0}
    table = study.throughput_table(t)
    assert table.loc["all runs", "mean / best run"] == pytest.approx(0.8) and table.loc["slow", "max"] == 600.0


def test_load_explains_the_gap_when_variants_are_equally_fast(tmp_path):
    # the same variants at the same nominal speed, slowed by the load: the gap is within variants
    speeds = {0: 1000.0, 1: 800.0, 2: 600.0}
    loads = {0: 1.0, 1: 3.0, 2: 5.0}
    runs = {(v, s): _run(tmp_path, v, s, speeds[s], load=loads[s]) for v in ("a", "b") for s in range(3)}
    frame = study.throughput_runs(runs)
    assert frame["load_1min"].tolist() == [1.0, 3.0, 5.0] * 2  # mean of start and end
    t = study.throughput_numbers(frame)
    assert t["between_share"] == pytest.approx(0.0) and t["within_share"] == pytest.approx(1.0)
    assert t["variance_between_share"] == pytest.approx(0.0)
    assert t["load"]["r"] == pytest.approx(-1.0) and t["load"]["r_within_variant"] == pytest.approx(-1.0)
    assert t["load"]["runs"] == 6 and (t["load"]["min"], t["load"]["max"]) == (1.0, 5.0)



def test_mixed_gap_splits_exactly_and_missing_fields_are_tolerated(tmp_path):
    runs = {("fast", 0): _run(tmp_path, "fast", 0, 1000.0, load=2.0),
            ("fast", 1): _run(tmp_path, "fast", 1, 900.0, old=True),  # old summary, no host.json
            ("slow", 0): _run(tmp_path, "slow", 0, 700.0, load=4.0),
            ("slow", 1): _run(tmp_path, "slow", 1, 500.0)}
    frame = study.throughput_runs(runs)
    assert frame.loc[1, ["run_seconds", "overhead_share", "load_1min"]].isna().all()
    t = study.throughput_numbers(frame)
    # gap = 1000 - 775 = 225; between = mean(0, 0, 300, 300) = 150; within = mean(0, 100, 0, 200) = 75
    assert t["gap"] == pytest.approx(225.0) and t["between"] == pytest.approx(150.0)
    assert t["within"] == pytest.approx(75.0) and t["between_share"] + t["within_share"] == pytest.approx(1.0)
    # eta squared: between-variant sum of squares / total
    tps = np.array([1000.0, 900.0, 700.0, 500.0])
    means = np.array([950.0, 950.0, 600.0, 600.0])
    assert t["variance_between_share"] == pytest.approx(((means - tps.mean()) ** 2).sum() / ((tps - tps.mean()) ** 2).sum())
    assert t["load"]["runs"] == 2 and t["load"]["r"] is None  # fewer than 3 runs with a load: no correlation
    rows = study._json_rows(frame)
    assert rows[1]["load_1min"] is None and rows[1]["run_seconds"] is None
    json.dumps(rows, allow_nan=False)  # JSON-ready: no NaN
    json.dumps(t, allow_nan=False)
    study.throughput_table(t)


def test_record_host_writes_beside_a_finished_run_only(tmp_path):
    run = _run(tmp_path, "x", 0, 100.0)
    out = study.record_host(run, study.host_snapshot(), trained_by="test", parallel_runs=2, order=3)
    assert study.read_host(run) == json.loads(json.dumps(out))
    assert out["parallel_runs"] == 2 and out["order"] == 3 and out["wall_seconds"] >= 0
    unfinished = tmp_path / "y"
    unfinished.mkdir()
    study.record_host(unfinished, study.host_snapshot(), trained_by="test")
    assert not (unfinished / "host.json").exists() and study.read_host(unfinished) == {}
