"""The pilot (study.pilot): one baseline per embedding recipe, the lens and C1's rules on each."""
from __future__ import annotations

import json

import pytest

from residshift.tools.cli import main
from residshift.analysis import verdicts as V
from residshift.core import profiles
from residshift.study import pilot


def _entry(early: str, late: str, early_estimate: float = 0.1) -> dict:
    rows = [{"claim_id": "C1.early", "verdict": early, "estimate": early_estimate},
            {"claim_id": "C1.late", "verdict": late, "estimate": 0.1}]
    return {"verdicts": rows}


def test_the_first_recipe_listed_that_reproduces_both_is_chosen():
    R, N, I = V.REPRODUCED, V.NOT_REPRODUCED, V.INCONCLUSIVE
    chosen = pilot.choose_recipe({"nanogpt": _entry(N, R), "gemma": _entry(R, R), "gemma-rope": _entry(R, R)})
    assert chosen["recipe"] == "gemma" and chosen["reproduces"]
    none = pilot.choose_recipe({"nanogpt": _entry(N, R, -0.01), "gemma": _entry(R, I, 0.4),
                                "gemma-rope": _entry(R, N, 0.3)})
    assert none == {"recipe": "gemma", "reproduces": False, "rule": none["rule"]} and "no recipe" in none["rule"]
    with pytest.raises(ValueError, match="run the pilot"):
        pilot.choose_recipe({})


def test_the_pilot_runs_at_smoke_and_writes_its_numbers(tmp_path, monkeypatch):
    monkeypatch.setenv("RESIDSHIFT_RESULTS", str(tmp_path / "results"))
    P = profiles.resolve("smoke")
    numbers = pilot.run_pilot(P, ["nanogpt", "gemma"], verbose=False)
    assert list(numbers["recipes"]) == ["nanogpt", "gemma"] and numbers["chosen"]["recipe"] in numbers["recipes"]
    for e in numbers["recipes"].values():
        claims = [r["claim_id"] for r in e["verdicts"]]
        assert {"C1.early", "C1.middle", "C1.late", "C1", "C1.depth"} <= set(claims)
        assert len(e["top1_input"]) == P.train_layers + 1 and e["tokens"] > 0 and e["tokens_per_s"] > 0
    # the gemma recipe starts the stream at the token: its input top-1 at h_1 is far above nanoGPT's
    assert numbers["recipes"]["gemma"]["top1_input"][1] > numbers["recipes"]["nanogpt"]["top1_input"][1]
    path = pilot.save_pilot(numbers, tmp_path / "pilot.json")
    back = pilot.load_pilot(path)
    assert back["chosen"] == numbers["chosen"] and json.loads(path.read_text())["seed"] == P.train_seeds[0]


def test_the_pilot_command_names_a_bad_recipe(capsys):
    assert main(["train", "--pilot", "--profile", "smoke", "--recipes", "bert"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown" in err[0] and "gemma-rope" in err[0]
