"""The generated tables (README's primary claims, docs/claims.md, docs/results.md) and the README's
authored findings, against the committed numbers."""
from __future__ import annotations

import json
import re

import pytest

from residshift import claims as C, findings
from residshift.tools import report

README = report.README.read_text()


def test_generated_tables_agree_with_the_saved_numbers():
    assert report.check_readme(), "a generated table is stale: run `python -m residshift report`"


def test_a_file_without_its_markers_names_the_fix(tmp_path):
    bad = tmp_path / "README.md"
    bad.write_text("no markers here\n")
    with pytest.raises(report.ReportError, match="add the two markers"):
        report.check_readme(bad, report.RESULTS, report.CLAIMS_MD)


def test_update_rewrites_only_the_blocks(tmp_path):
    files = {}
    for name, (start, end) in {"README.md": (report.HEAD_START, report.HEAD_END),
                               "results.md": (report.START, report.END),
                               "claims.md": (report.CLAIMS_START, report.CLAIMS_END)}.items():
        files[name] = tmp_path / name
        files[name].write_text(f"authored above\n{start}\nold\n{end}\nauthored below\n")
    args = (files["README.md"], files["results.md"], files["claims.md"])
    assert not report.check_readme(*args)
    assert report.update_readme(*args)
    assert report.check_readme(*args) and not report.update_readme(*args)
    for f in files.values():
        text = f.read_text()
        assert text.startswith("authored above\n") and text.endswith("authored below\n") and "\nold\n" not in text


def test_every_mark_in_the_headline_is_in_its_legend():
    head = README.split(report.HEAD_START, 1)[1].split(report.HEAD_END, 1)[0]
    body, legend = head.rsplit("\n\n", 2)[0], report.LEGEND
    used = set(re.findall(r"[✓✗?*°]", body.split("|---", 1)[1]))
    assert used <= {m for m in "✓✗?*" if m in legend}, used
    assert len([line for line in body.splitlines() if line.startswith("| `")]) <= 12


def test_no_module_writes_sentences_from_numbers():
    """The sentence writers are gone: what remains renders tables (issue 49)."""
    pkg = report.REPO_ROOT / "residshift"
    for gone in ("study/found.py", "study/found_training.py", "study/findings.py", "study/prose.py", "study/notes.py"):
        assert not (pkg / gone).exists(), gone
    readers = [*(pkg / "study").glob("*.py"), pkg / "tools" / "report.py", pkg / "claims.py"]
    offenders = [f"{p.relative_to(pkg)}:{m.group(0)}" for p in readers
                 for m in re.finditer(r"^def \w+_(found|lines|sentence)\(", p.read_text(), re.M)]
    assert offenders == []


# ----------------------------------------------------------------------------------------------
# The README's findings: every number in its sentences, recomputed from figures/*.json
# ----------------------------------------------------------------------------------------------

FINDINGS = README.split("## What the study found", 1)[1].split("<!-- headline:start -->", 1)[0]


def _says(text: str) -> None:
    flat = " ".join(FINDINGS.split())
    assert " ".join(text.split()) in flat, f"the README's findings no longer say: {text!r}"


def _depth(name: str, stat: str, metric: str = "top1") -> dict:
    return next(m for m in C.saved("03-alignment-curves-shift-depth")[f"{name} · logit lens"]
                if m["metric"] == metric)[stat]


MODELS = ("smollm2-135m", "gemma3-270m", "qwen25-coder-1.5b")


def test_finding_1_the_input_token_is_lost_after_block_0_or_1():
    fades = [_depth(m, "fade")["relative"] for m in MODELS]
    assert f"{min(fades):.2f}–{max(fades):.2f}" == "0.02–0.05"
    assert max(max(_depth(m, "fade")["relative_hi"] - _depth(m, "fade")["relative"],
                   _depth(m, "fade")["relative"] - _depth(m, "fade")["relative_lo"]) for m in MODELS) <= 0.002
    _says("falls half-way to its floor by 0.02–0.05 of depth")
    early = {r["model"]: r["verdict"] for r in C.saved("03-alignment-curves-verdicts")
             if r["claim_id"] == "C1.early" and r["variant"] == "logit lens"}
    assert set(early.values()) == {"not reproduced"} and len(early) == 3


def test_finding_2_crossing_early_emergence_late():
    cross = [tuple(round(_depth(m, "crossing")[k], 2) for k in ("relative", "relative_lo", "relative_hi"))
             for m in MODELS]
    assert cross == [(0.03, 0.03, 0.03), (0.29, 0.26, 0.31), (0.21, 0.20, 0.22)], cross
    _says("at 0.03 [0.03, 0.03] (SmolLM2), 0.29 [0.26, 0.31] (Gemma-3) and 0.21 [0.20, 0.22] (Qwen) of depth")
    assert all(o.verdict == "not reproduced" for o in C.outcomes(C.CLAIM["C1.switch/pretrained"]))
    top1 = [_depth(m, "emergence")["relative"] for m in MODELS]
    every = [_depth(m, "emergence", k)["relative"] for m in MODELS for k in ("top1", "prob", "logrank")]
    assert f"{min(top1):.2f}–{max(top1):.2f}" == "0.79–0.83"
    assert f"{min(every):.2f}–{max(every):.2f}" == "0.63–0.83"
    lo, hi = (min(_depth(m, "emergence")["relative_lo"] for m in MODELS), max(_depth(m, "emergence")["relative_hi"] for m in MODELS))
    assert (round(lo, 2), round(hi, 2)) == (0.78, 0.84)
    _says("0.79–0.83 of depth (every interval within 0.78–0.84; 0.63–0.83 over the three metrics we read)")


def test_finding_3_no_late_cut_helps_a_frozen_model():
    best = C.saved("04-attenuation-sweep-best-cut")
    assert [tuple(round(best[m]["late"][k], 3) for k in ("mean", "lo", "hi")) for m in ("smollm2-135m", "gemma3-270m")] \
        == [(0.007, 0.003, 0.011), (0.017, 0.013, 0.022)]
    _says("+0.007 nats [0.003, 0.011] on SmolLM2 (block 24) and +0.017 [0.013, 0.022] on Gemma-3 (block 17)")
    assert (best["smollm2-135m"]["late"]["layer"], best["gemma3-270m"]["late"]["layer"]) == (24, 17)
    assert all(o.verdict == "not reproduced" for o in C.outcomes(C.CLAIM["C2.late-cut/frozen"]))
    a0 = C.saved("04-attenuation-sweep-alpha0")
    rest = [r["dloss"] for r in a0 if not (r["model"] == "smollm2-135m" and r["block"] == 0)]
    assert f"{min(rest):.1f}–{max(rest):.1f}" == "4.3–26.4"
    assert round(min(r["lo"] for r in a0 if not (r["model"] == "smollm2-135m" and r["block"] == 0)), 1) == 4.2
    assert min(r["lo"] for r in a0 if not (r["model"] == "smollm2-135m" and r["block"] == 0)) > 4.1
    b0 = next(r for r in a0 if r["model"] == "smollm2-135m" and r["block"] == 0)
    assert round(b0["dloss"], 3) == 0.005 and b0["lo"] < 0 < b0["hi"]
    g = best["gemma3-270m"]["overall"]
    assert (g["layer"], g["alpha"], g["status"]) == (1, 0.9, "confirmed")
    assert [f"{x:.3f}" for x in (g["mean"], g["lo"], g["hi"])] == ["-0.005", "-0.010", "-0.001"]
    _says("4.3–26.4 nats (every interval above 4.1) at every block except SmolLM2's block 0 (+0.005, interval spans 0)")
    _says("α = 0.9 at Gemma-3's block 1, −0.005 nats [−0.010, −0.001]")


def test_finding_4_training():
    rows = C.saved("06-training-with-attenuation-verdicts")
    hurts = [r for r in rows if r["claim_id"] == "C2-training.alpha0-hurts"]
    assert {r["verdict"] for r in hurts} == {"reproduced"} and len(hurts) == 4
    est = [r["estimate"] for r in hurts]
    assert f"{min(est):.2f}–{max(est):.2f}" == "0.42–1.12" and 0.16 < min(r["ci"][0] for r in hurts) < 0.17
    mild = [r for r in rows if r["claim_id"] == "C2-training.late-cut" and r["variant"] != "block 5, alpha=0"]
    gates = [r for r in C.saved("07-learned-gates-and-benchmarks-verdicts") if r["claim_id"] == "C3-training.beats-baseline"]
    assert f"{min(r['estimate'] for r in mild):+.3f} to {max(r['estimate'] for r in mild):+.3f}" == "-0.003 to +0.037"
    assert [f"{r['estimate']:+.3f} [{r['ci'][0]:+.3f}, {r['ci'][1]:+.3f}]" for r in gates] == \
        ["+0.012 [-0.089, +0.112]", "+0.061 [-0.024, +0.146]"]
    assert all(r["ci"][0] < 0 < r["ci"][1] for r in mild + gates)
    mdes = [r["details"]["mde"] for r in mild + gates]
    assert f"{min(mdes):.2f}–{max(mdes):.2f}" == "0.10–0.16"
    assert f"{min(mdes) / C.PAPER_EFFECT:.0f}–{max(mdes) / C.PAPER_EFFECT:.0f}" == "18–28"
    need = [C.seeds_needed(r["details"]["sd"]) for r in mild + gates]
    assert (round(min(need), -2), round(max(need), -2)) == (600, 1600), need
    _says("raises the final validation loss by 0.42–1.12 nats")
    _says("every interval above 0.16")
    _says("+0.037 nats, and the learned gates by +0.012 [−0.089, +0.112] and +0.061 [−0.024, +0.146]")
    _says("Their MDEs are 0.10–0.16 nats, 18–28 times")
    _says("600–1,600 seeds")


def test_finding_5_the_trained_models_are_near_bigram():
    ladder = C.saved("10-the-scale-ladder")
    assert C.saved("06-training-with-attenuation-grid")["tokens_per_run"] == 358_400
    r0 = next(r for r in ladder["rows"] if r["model"] == "6x128-r0 at 358,400 tokens")
    assert [round(x, 2) for x in (r0["early_share"], *r0["early_share_ci"])] == [0.72, 0.68, 0.75]
    assert r0["outcome"] == "near-bigram"
    gemma = next(p for p in ladder["pretrained"] if p["model"] == "gemma3-270m")
    assert [round(gemma[k], 2) for k in ("S1", "S1_lo", "S1_hi")] == [0.04, 0.03, 0.05]
    assert len(ladder["rows"]) == 9 and {r["middle"] for r in ladder["rows"]} == {"not reproduced"}
    assert {r["departure_layer"] for r in ladder["rows"]} <= {1, 2}
    assert max(int(r["model"].split(" at ")[1].split()[0].replace(",", "")) for r in ladder["rows"]) == 5_734_400
    _says("already makes 0.72 [0.68, 0.75] of its final next-token top-1 after block 0 (Gemma-3-270M: 0.04 [0.03, 0.05])")
    probe = findings.numbers("11")  # the vocabulary probe's sentence
    assert probe["cells judged; seeds each"] == (
        ["12x128, vocab 1,024", "12x128, vocab 16,384", "12x256, vocab 16,384"], [3, 3, 3])
    assert {x for seeds in probe["departure layer per seed"] for x in seeds} <= {1, 2}
    assert probe["mean departure depth [CI]"][1] == (0.11, -0.01, 0.23)
    assert probe["departure depth per seed"][2] == [0.08, 0.08, 0.08]
    assert probe["pretrained departure depth (min, max)"] == (0.57, 0.71)
    assert probe["verdicts; C1.middle across seeds"][1] == ["not reproduced"] * 3
    assert probe["left: cells short of three seeds (tokens/s here, hours)"] == []
    _says("the next token leaves the frequency guess at block 1 or 2 in every one of 3 seeds per setting (departure "
          "depth 0.11 [−0.01, 0.23] of depth at the larger vocabulary, 0.08 in every seed at width 256, against "
          "0.57–0.71 in the pretrained models), with no quiet middle in any of the 9 seeds.")


def test_the_how_long_sentence_reads_runs_json():
    runs = json.loads((report.REPO_ROOT / "figures" / "RUNS.json").read_text())["default"]
    cold = {nb: (e.get("cold_run") or e) for nb, e in runs.items()}
    assert round(sum(e["wall_s"] for e in cold.values()) / 60) == 140
    assert all((e.get("invocation") or {}).get("from_empty_caches") for e in cold.values())
    assert round(cold["03-alignment-curves"]["wall_s"] / 60) == 61
    assert round(cold["06-training-with-attenuation"]["wall_s"] / 60) == 47
    assert "take about 140 minutes" in " ".join(README.split())
    assert "notebook 03 (61 min) and 06 (47 min)" in " ".join(README.split())
