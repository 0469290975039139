"""The numbers each notebook's authored findings quote, read from the committed numbers (``figures/*.json``).

A notebook ends with a few sentences its authors wrote and one cell::

    findings.check("03", {"input fade, top-1 (SmolLM2, Gemma-3, Qwen)": (0.02, 0.05, 0.02), ...})

:func:`numbers` reads the saved numbers and returns every quantity the sentences quote, rounded as the
sentences state it (a verdict as its word); :func:`check` fails, naming each label, when a regeneration
no longer reads as the sentences say, or when a label is missing on either side. The sentences are
written by people; this module only reads and rounds.
"""
from __future__ import annotations

from typing import Any, Callable

from . import claims
from .claims import saved, seeds_needed

S, G, Q = "smollm2-135m", "gemma3-270m", "qwen25-coder-1.5b"


def span(xs, k: int = 2) -> tuple[float, float]:
    """(min, max) rounded to ``k`` decimals."""
    xs = list(xs)
    return round(min(xs), k), round(max(xs), k)


def ci(r: dict, k: int = 3) -> tuple[float, float, float]:
    """A saved verdict row's estimate and interval, rounded."""
    return round(r["estimate"], k), round(r["ci"][0], k), round(r["ci"][1], k)


def _by(source: str, *keys: str) -> dict[tuple, dict]:
    return {tuple(r[k] for k in keys): r for r in saved(source)}


def _depth(model_decoder: str, what: str, metric: str = "top1") -> float:
    return next(m for m in saved("03-alignment-curves-shift-depth")[model_decoder] if m["metric"] == metric)[what]


def _nb00() -> dict[str, Any]:
    d = saved("00-models-and-data")
    m, p = {r["name"]: r for r in d["models"]}, {r["model"]: r for r in d["perplexity"]}
    defs = {r["model"]: r for r in d["perplexity_definitions"]}
    wt2 = next(r for r in d["corpora"] if (r["corpus"], r["split"]) == ("wikitext-2", "validation"))
    per_word = [wt2[f"tokens[{n}]"] / wt2["words"] for n in (S, G, Q)]
    return {
        "SmolLM2 and Gemma-3 tied (one tensor, write probe 0)": all(
            m[n]["tied_same_tensor"] and m[n]["write_probe_diff"] == 0 for n in (S, G)),
        "Qwen untied, read through its output head": not m[Q]["tied_same_tensor"] and m[Q]["decoder"] == "output",
        "Qwen head vs embedding (relative distance, row cosine)": (
            round(m[Q]["head_vs_embedding_rel_dist"], 3), round(m[Q]["head_vs_embedding_row_cos"], 3)),
        "perplexity and its se (SmolLM2, Gemma-3, Qwen)": [(round(p[n]["ppl"], 1), round(p[n]["ppl_se"], 1))
                                                          for n in (S, G, Q)],
        "windows": {p[n]["windows"] for n in (S, G, Q)},
        "perplexity under 0.001 of the uniform guess": all(p[n]["ppl"] / p[n]["uniform_ppl"] < 0.001 for n in (S, G, Q)),
        "tokens per word (SmolLM2, Gemma-3, Qwen)": [round(x, 3) for x in per_word],
        "Gemma-3's vocabulary over SmolLM2's": round(m[G]["vocab"] / m[S]["vocab"], 1),
        "Gemma-3 cuts under 2% fewer tokens": 1 - per_word[1] / per_word[0] < 0.02,
        "per-word perplexity: lm-eval, se, ours, se (SmolLM2, Qwen, Gemma-3)": [
            tuple(round(defs[n][k]) for k in ("doc_word_ppl", "doc_word_ppl_se", "sliding_word_ppl", "sliding_word_ppl_se"))
            for n in (S, Q, G)],
        "lm-eval articles, their length, their <unk>": {(defs[n]["documents"], defs[n]["doc_max_length"], defs[n]["doc_unk"])
                                                       for n in (S, G, Q)},
        "<unk> is its own token (SmolLM2, Gemma-3, Qwen)": [bool(defs[n]["doc_unk_special"]) for n in (S, G, Q)],
    }


def _nb01() -> dict[str, Any]:
    t = saved("01-the-causal-shift-tug-of-war")  # SmolLM2 on the example sentence
    one = saved("01-the-causal-shift-one-curve")
    sm, ge = one[S], one[G]
    rin, rnext = t["rank_input_median"], t["rank_next_median"]
    em = [x["metrics"]["top1"]["emergence"] for x in (sm, ge)]
    return {
        "model, positions, layers": (t["model"], t["positions"], t["n_layers"]),
        "input's median rank at h_0, h_1, best after": (rin[0], rin[1], min(rin[1:])),
        "block 0's write over the embedding, cos(h_0, h_1) (SmolLM2, Gemma-3)": [
            (round(x["block 0 write"]["relative write"], 1), round(x["block 0 write"]["cos(h_0, h_1)"], 2))
            for x in (sm, ge)],
        "input fade on top-1, l/L (SmolLM2, Gemma-3)": [round(x["metrics"]["top1"]["fade"]["l/L"], 2) for x in (sm, ge)],
        "rank crossing layer; median ranks there (input, next)": (t["events"]["rank crossing"]["layer"], rin[1], rnext[1]),
        "layers where the next token is the median top choice": [k for k, r in enumerate(rnext) if r <= 1],
        "top-1 emergence l/L (SmolLM2, Gemma-3)": [round(x["l/L"], 2) for x in em],
        "SmolLM2's emergence interval (layers)": (em[0]["lo"], round(em[0]["hi"], 1)),
        "positions decoding their input at h_0 (SmolLM2, Gemma-3)": [
            (round(x["metrics"]["top1"]["input"][0] * x["positions"]), x["positions"]) for x in (sm, ge)],
    }


def _first_layer(x: dict, test: Callable[[float, float], bool]) -> int:
    """The first layer >= 1 where ``test(input share, next share)`` holds."""
    return next(k for k in range(1, x["n_layers"] + 1) if test(x["input"][k], x["next"][k]))


def _nb02() -> dict[str, Any]:
    d = saved("02-decoding-trajectories-shares")  # the example sentences pooled
    sm, ge, qw = (d[m] for m in (S, G, Q))
    half = [_first_layer(x, lambda i, n, f=x["next"][-1]: n >= f / 2) for x in (sm, ge, qw)]
    return {
        "positions (SmolLM2, Gemma-3, Qwen)": [x["positions"] for x in (sm, ge, qw)],
        "input share at h_0": [round(x["input"][0], 2) for x in (sm, ge, qw)],
        "input share from h_1 at most (SmolLM2, Qwen)": (max(sm["input"][1:]), round(max(qw["input"][1:]), 2)),
        "Gemma-3's input share at h_1, at most from h_2": (round(ge["input"][1], 2), round(max(ge["input"][2:]), 2)),
        "last layer where under half decode either token": [
            _first_layer(x, lambda i, n: i + n >= 0.5) - 1 for x in (sm, ge, qw)],
        "next share at the last layer": [round(x["next"][-1], 2) for x in (sm, ge, qw)],
        "first layer with half of it": half,
        "that layer, l/L": [round(h / x["n_layers"], 2) for h, x in zip(half, (sm, ge, qw))],
    }


def _nb03() -> dict[str, Any]:
    from .analysis.stats import crossing_point
    from .measure.lens import ORIENTATION

    depth = saved("03-alignment-curves-shift-depth")
    logit = [k for k in depth if k.endswith("logit lens")]
    every = lambda what: [m[what]["relative"] for k in logit for m in depth[k]]  # noqa: E731
    cross = []  # every paired metric's mean curves: the interpolated crossing, and the first layer past it
    for c in saved("03-alignment-curves-metrics").values():
        for metric, o in ORIENTATION.items():
            if f"{metric}_next" in c:
                x = crossing_point(c[f"{metric}_input"]["estimate"], c[f"{metric}_next"]["estimate"], orientation=o)
                n_layers = len(c[f"{metric}_next"]["estimate"]) - 1
                cross.append((x / n_layers, -(-x // 1) / n_layers))
    v = _by("03-alignment-curves-verdicts", "model", "variant", "claim_id")
    return {
        "input fade, every metric (min, max)": span(every("fade")),
        "input fade, top-1 (SmolLM2, Gemma-3, Qwen)": tuple(round(_depth(f"{m} · logit lens", "fade")["relative"], 2)
                                                           for m in (S, G, Q)),
        "input fade before h_2 everywhere": max(m["fade"]["crossing"] for k in logit for m in depth[k]) < 2,
        "paired metrics": len(cross),
        "crossing, interpolated (min, max)": span(c for c, _ in cross),
        "crossing, first layer past it (min, max)": span(f for _, f in cross),
        "emergence, top-1 (min, max)": span(_depth(f"{m} · logit lens", "emergence")["relative"] for m in (S, G, Q)),
        "emergence, every metric (min, max)": span(every("emergence")),
        "C1 early, middle, late, overall (each model)": {
            tuple(v[m, "logit lens", k]["verdict"] for k in ("C1.early", "C1.middle", "C1.late", "C1"))
            for m in (S, G, Q)},
        "tuned lens: C1.early, its excess at h_1 (SmolLM2, Gemma-3)": [
            (v[m, "tuned lens", "C1.early"]["verdict"], round(v[m, "tuned lens", "C1.early"]["estimate"], 2))
            for m in (S, G)],
        "tuned lens: crossing on every metric": {round(x["crossing"]["relative"], 2) for m in (S, G)
                                                 for x in depth[f"{m} · tuned lens"]},
        "tuned lens: top-1 emergence (SmolLM2, Gemma-3)": [
            round(_depth(f"{m} · tuned lens", "emergence")["relative"], 2) for m in (S, G)],
    }


def _nb04() -> dict[str, Any]:
    a0, best = saved("04-attenuation-sweep-alpha0"), saved("04-attenuation-sweep-best-cut")
    v = _by("04-attenuation-sweep-verdicts", "model", "claim_id")
    b0 = next(r for r in a0 if (r["model"], r["block"]) == (S, 0))
    out: dict[str, Any] = {
        "alpha = 0 elsewhere (min, max, nats)": span((r["dloss"] for r in a0 if (r["model"], r["block"]) != (S, 0)), 1),
        "alpha = 0 at SmolLM2's block 0 [CI]": tuple(round(b0[k], 3) for k in ("dloss", "lo", "hi")),
    }
    for m, name in ((S, "SmolLM2"), (G, "Gemma-3")):
        r, late = v[m, "C2.layer-sensitive"], best[m]["late"]
        out[f"{name}: layer-sensitive, contrast [CI], blocks, permutation p"] = (
            r["verdict"], tuple(round(x, 2) for x in (r["estimate"], *r["ci"])),
            (r["details"]["most_harmful_block"], r["details"]["least_harmful_block"]), round(r["details"]["permutation_p"], 4))
        out[f"{name}: late-cut, best late cell, its loss change [CI], windows"] = (
            v[m, "C2.late-cut"]["verdict"], (late["layer"], late["alpha"]),
            tuple(round(late[k], 3) for k in ("mean", "lo", "hi")), late["n"])
    o = best[G]["overall"]
    out["SmolLM2's best late cell on its 8 selection windows"] = (round(best[S]["late"]["selection_mean"], 3),
                                                                  best[S]["n_selection"])
    out["SmolLM2's best cut anywhere is that late cell"] = (best[S]["same_cell"], best[S]["overall"]["status"])
    out["Gemma-3's best cut anywhere: block, alpha, region, status, windows"] = (
        o["layer"], o["alpha"], o["region"], o["status"], o["n"])
    out["its loss change [CI], one-sided p"] = tuple(round(o[k], 3) for k in ("mean", "lo", "hi", "p"))
    return out


def _nb05() -> dict[str, Any]:
    v = {(r["model"], r["claim_id"], r["variant"].split()[0]): r for r in saved("05-learned-gates-verdicts")}
    kinds = ("scalar", "token")
    seeds = lambda m, k, key: [s[key] for s in v[m, "C3.concentrates", k]["details"]["per_seed"]]  # noqa: E731
    word = lambda c: [v[m, c, k]["verdict"] for m in (S, G) for k in kinds]  # noqa: E731
    est = lambda c: [round(v[m, c, k]["estimate"], 3) for m in (S, G) for k in kinds]  # noqa: E731
    final = [max(seeds(m, k, "final_attenuation")) for m in (S, G) for k in kinds]
    cut = v[G, "C3.beats-best-cut", "scalar"]
    bench = [v[m, "C3.benchmarks", k] for m in (S, G) for k in kinds]
    tasks = [c for r in bench for cs in r["details"]["tasks"].values() for c in cs]
    return {
        "every fit ended by": {f["ended by"] for f in saved("05-learned-gates-fits")},
        "concentrates (SmolLM2 scalar, token; Gemma-3 scalar, token)": word("C3.concentrates"),
        "concentrates.material": word("C3.concentrates.material"),
        "SmolLM2 scalar: final block over the next, per seed": [round(x, 1) for x in seeds(S, "scalar", "ratio")],
        "most attenuated block per seed": [seeds(m, k, "most_attenuated_block") for m in (S, G) for k in kinds],
        "Gemma-3's largest attenuation (scalar, token)": [round(max(seeds(G, k, "runner_up_attenuation")), 2) for k in kinds],
        "final block's attenuation: Gemma-3 below 0.001, largest anywhere": (max(final[2:]) < 0.001, round(max(final), 3)),
        "beats-baseline": word("C3.beats-baseline"),
        "beats-baseline, loss change": est("C3.beats-baseline"),
        "Gemma-3 scalar vs its best cut: verdict, cut, windows": (cut["verdict"], cut["details"]["cut"]["label"], cut["n"]),
        "its loss change [CI]": ci(cut),
        "misalignment, rank, emergence-shift": {w for c in ("C3.misalignment", "C3.misalignment.rank",
                                                            "C3.emergence-shift") for w in word(c)},
        "log-prob change (min, max), largest log10-rank rise": (*span(est("C3.misalignment"), 3),
                                                               max(est("C3.misalignment.rank"))),
        "largest emergence move": max(map(abs, est("C3.emergence-shift"))),
        "benchmarks": set(word("C3.benchmarks")),
        "items per task; most answers changed": ({c["n"] for c in tasks}, max(c["n_discordant"] for c in tasks)),
        "best-case detectable drop, items needed": {(round(max(r["details"]["reach"]["best_case_drop"].values()), 3),
                                                    r["details"]["reach"]["items_needed_at_best"]) for r in bench},
    }


def _seed_power(rows: list[dict], k: int = 2) -> dict[str, Any]:
    """MDE and seed sd of seed-unit rows, and the seeds a paired test needs to detect the paper's effect."""
    sd = [r["details"]["sd"] for r in rows]
    return {"MDE (nats)": [round(r["details"]["mde"], k) for r in rows], "seed sd (nats)": [round(s, 3) for s in sd],
            "seeds for the paper's effect (hundreds)": [round(seeds_needed(s), -2) for s in sd]}


def _scale(model_part: str) -> dict:
    return next(r["scale"] for r in saved("10-the-scale-ladder-scale") if model_part in r.get("scale", {}).get("model", ""))


def _nb06() -> dict[str, Any]:
    by = _by("06-training-with-attenuation-verdicts", "claim_id", "variant")
    hurt = [by["C2-training.alpha0-hurts", f"alpha=0 at block {b}"] for b in (0, 2, 4, 5)]
    late = [by["C2-training.late-cut", f"block 5, alpha={a}"] for a in ("0", "0.5", "0.75", "0.9")]
    sens = [by["C2-training.layer-sensitive", f"alpha={a}"] for a in ("0", "0.5", "0.75", "0.9")]
    sw = _scale("6x128")
    return {
        "alpha0-hurts at blocks 0, 2, 4, 5": [r["verdict"] for r in hurt],
        "every interval and every seed above 0; seeds; sign-flip p": (
            all(r["ci"][0] > 0 and min(r["details"]["per_seed_values"]) > 0 for r in hurt),
            {r["n"] for r in hurt}, {r["details"]["p_signflip"] for r in hurt}),
        "alpha = 0 loss change per block": [round(r["estimate"], 2) for r in hurt],
        "late-cut at alpha 0, 0.5, 0.75, 0.9": [r["verdict"] for r in late],
        "late-cut loss change at 0.5, 0.75, 0.9": [round(r["estimate"], 3) for r in late[1:]],
        "their intervals contain 0": all(r["ci"][0] < 0 < r["ci"][1] for r in late[1:]),
        "layer-sensitive at alpha 0, 0.5, 0.75, 0.9": [r["verdict"] for r in sens],
        "largest block gap at alpha = 0": round(sens[0]["estimate"], 2),
        "paper's effect (nats)": round(claims.PAPER_EFFECT, 4),
        **_seed_power(late[1:]),
        "baselines: outcome, C1.middle, seeds, S1 [CI]": (
            sw["outcome"], sw["middle"], sw["n"], tuple(round(x, 2) for x in (sw["early_share"], *sw["early_share_ci"]))),
    }


def _nb07() -> dict[str, Any]:
    by = _by("07-learned-gates-and-benchmarks-verdicts", "claim_id", "variant")
    final = saved("07-learned-gates-and-benchmarks-alphas")["final"]
    att = {g: [r["attenuation"] for r in final if r["variant"] == g] for g in ("learned", "learned-token")}
    beat = [by["C3-training.beats-baseline", g] for g in att]
    cmp = saved("07-learned-gates-and-benchmarks-compare")
    bm = saved("07-learned-gates-and-benchmarks-benchmarks")
    return {
        "per-layer gates: largest attenuation at most 0.011": max(att["learned"]) <= 0.011,
        "token gates: block 0 most, by": (max(att["learned-token"]) == att["learned-token"][0],
                                          round(att["learned-token"][0], 2)),
        "last block's attenuation (per-layer, token)": [
            round(by["C3-training.concentrates.material", g]["estimate"], 3) for g in att],
        "concentrates.material": {by["C3-training.concentrates.material", g]["verdict"] for g in att},
        "beats-baseline loss change [CI] (per-layer, token)": [ci(r) for r in beat],
        "beats-baseline and beats-best-cut": {by[c, g]["verdict"] for c in ("C3-training.beats-baseline",
                                                                            "C3-training.beats-best-cut") for g in att},
        "lowest-loss fixed cut, seeds": (cmp["variant"][0].split(" (")[0], len(cmp["per seed"][0])),
        "its loss change [CI]": tuple(round(cmp[k][0], 3) for k in ("vs baseline", "lo", "hi")),
        **_seed_power(beat),
        "items per task": set(bm["items"].values()),
        "tasks above chance; ARC-easy accuracy, chance": (
            [k for k, x in bm.items() if k.endswith("(acc)") and x[-1] == "yes"], bm["arc-easy (acc)"][0::4]),
        "C4 rows not assessable at this profile": sum(r["details"]["why"].startswith("not assessable at this profile")
                                                      for r in by.values() if r["claim_id"] == "C4.benchmarks"),
    }


def _nb08() -> dict[str, Any]:
    rows = saved("08-misalignment-after-mitigation-verdicts")
    c1 = {(r["claim_id"], r["model"].split(", ")[1].split()[0]): r["verdict"] for r in rows if r["claim_id"].startswith("C1")}
    reg = saved("08-misalignment-after-mitigation-regimes")
    mis = {r["variant"]: r for r in rows if r["claim_id"] in ("C2-training.cut-misalignment", "C3-training.misalignment")}
    worse = sorted(v for v, r in mis.items() if r["verdict"] == "not reproduced")
    shift = [r for r in rows if r["claim_id"] in ("C2-training.cut-emergence-shift", "C3-training.emergence-shift")]
    scaled = [r["scale"] for r in saved("10-the-scale-ladder-scale") if r.get("source", "").startswith("08") and "scale" in r]
    sw = scaled[0]
    return {
        "C1 early, middle, late, overall (gemma, nanogpt)": [
            tuple(c1[k, e] for k in ("C1.early", "C1.middle", "C1.late", "C1")) for e in ("gemma", "nanogpt")],
        "S1 per seed, gemma embedding (seeds, min, max)": (
            len(reg["gemma"]), *span(x["next"][1] / x["next"][-1] for x in reg["gemma"].values())),
        "input top-1 at h_1: gemma (min, max), nanogpt under 0.01": (
            *span(x["input"][1] for x in reg["gemma"].values()), max(x["input"][1] for x in reg["nanogpt"].values()) < 0.01),
        "edits that raise the rank and are not mitigations": worse,
        "their reason": {mis[v]["details"]["why"].split(":")[0] for v in worse},
        "their log10 rank rise (min, max)": span(mis[v]["estimate"] for v in worse),
        "the other misalignment rows": {r["verdict"] for v, r in mis.items() if v not in worse},
        "emergence-shift rows, their verdicts": (len(shift), {r["verdict"] for r in shift}),
        "baselines: outcome, counted as evidence, S1 [CI]": (
            {s["outcome"] for s in scaled}, any(s["counts_as_evidence"] for s in scaled),
            tuple(round(x, 2) for x in (sw["early_share"], *sw["early_share_ci"]))),
    }


def _nb09() -> dict[str, Any]:
    gemma = saved("09-who-removes-the-input-token-gemma3-270m")[G]
    smol = saved("09-who-removes-the-input-token-smollm2-135m")[S]
    trained = saved("09-who-removes-the-input-token-trained")
    base, edited = trained["baseline"], [m for v, m in trained.items() if v != "baseline"]
    at = lambda m, term, block=0: m["input"][term]["estimate"][block]  # noqa: E731

    def largest_fall_and_part(m):
        d = m["input"]["delta"]["estimate"]
        parts = {t: at(m, t) for t in ("attn", "mlp", "skip", "rescale") if t in m["input"]}
        return d.index(min(d)), m["input"]["delta"]["hi"][0] < 0, min(parts, key=parts.get)

    return {
        "block of the largest fall, its interval below 0, its largest negative part (every model)": {
            largest_fall_and_part(m) for m in (gemma, smol, *trained.values())},
        "fall across block 0 (Gemma-3, SmolLM2, baseline)": (round(at(gemma, "delta")), round(at(smol, "delta")),
                                                             round(at(base, "delta"), 1)),
        "norm rescaling there": (round(at(gemma, "rescale")), round(at(smol, "rescale")), round(at(base, "rescale"), 1)),
        "Gemma-3 block 1: fall, rescaling": (round(at(gemma, "delta", 1)), round(at(gemma, "rescale", 1))),
        "Gemma-3 block 0: MLP, attention": (round(at(gemma, "mlp"), 1), round(at(gemma, "attn"), 1)),
        "block 0 MLP (SmolLM2, baseline)": (round(at(smol, "mlp"), 1), round(at(base, "mlp"), 1)),
        "block 0 attention (SmolLM2, baseline)": (round(at(smol, "attn"), 1), round(at(base, "attn"), 2)),
        "edited GPTs' fall across block 0 (min, max)": span(at(m, "delta") for m in edited),
        "skip edit's part (most negative; the token gates')": (round(min(at(m, "skip") for m in edited), 2),
                                                              round(at(trained["learned-token"], "skip"), 2)),
    }


def _nb10() -> dict[str, Any]:
    d = saved("10-the-scale-ladder")
    fin = {r["rung"]: r for r in d["readings"] if r["final"]}
    sw = _scale("24x128-r0")
    rows = saved("10-the-scale-ladder-verdicts")
    return {
        "finished rungs; budgets": (len(fin), sorted({round(r["tokens"], -5) for r in fin.values()})),
        "a rung with a quiet middle or the deep switch": any(
            r["middle"] != "not reproduced" or r["outcome"] == "deep switch" for r in fin.values()),
        "S1 over the rungs (min, max)": span(r["S1"] for r in fin.values()),
        "pretrained: S1 (min, max), all with the deep switch": (
            *span(r["S1"] for r in d["pretrained"]), len(d["pretrained"]), {r["outcome"] for r in d["pretrained"]}),
        "next-token top-1 at h_L (min, max) at 0.36M and 5.7M tokens": [
            span(fin[f"{s}x128-r{k}"]["top1_next_hL"] for s in (6, 12, 24)) for k in (0, 2)],
        "next-token top-1 at h_1 per budget (6x128, 24x128)": [
            [round(fin[f"{s}x128-r{k}"]["top1_next_h1"], 3) for k in range(3)] for s in (6, 24)],
        "departure depth (min, max); layers": (*span(r["departure_depth"] for r in fin.values()),
                                               {r["departure_layer"] for r in d["rows"]}),
        "pretrained departure depth (min, max)": span(r["row"]["departure_depth"] for r in d["pretrained"]),
        "mitigation rung, its ladder S1": (d["mitigation_rung"]["rung"], round(d["mitigation_rung"]["S1"], 2)),
        "its baselines: seeds, S1 [CI], sd over seeds, counted as evidence": (
            sw["n"], tuple(round(x, 2) for x in (sw["early_share"], *sw["early_share_ci"])),
            round((sw["early_share_ci"][1] - sw["early_share_ci"][0]) / 2 / 2.262157 * 10 ** 0.5, 2),
            sw["counts_as_evidence"]),
        "late cut, gates: verdicts, seeds": ([r["verdict"] for r in rows], [r["n"] for r in rows]),
        "their loss change [CI]": [ci(r) for r in rows],
        **_seed_power(rows, 3),
    }


def _nb11() -> dict[str, Any]:
    d = saved("11-the-vocabulary-probe")
    rows = d["rows"]
    cost = {}
    for c in d["cost"]:
        cell = next(x["cell"] for x in d["curves"] if x["rung"] == c["rung"])
        cost.setdefault(cell, []).append(c["train_s"] / 60)
    return {
        "cells judged; seeds each": ([r["cell"] for r in rows], [len(r["seeds"]) for r in rows]),
        "departure depth per seed": [[None if x is None else round(x, 2) for x in r["depths"]] for r in rows],
        "departure layer per seed": [[None if x is None else round(x * r["n_layers"]) for x in r["depths"]]
                                     for r in rows],
        "mean departure depth [CI]": [tuple(round(x, 2) for x in (r["depth"], *r["depth_ci"])) for r in rows],
        "verdicts; C1.middle across seeds": ([r["verdict"] for r in rows], [r["middle"] for r in rows]),
        "next-token excess at h_1 [CI]": [tuple(round(x, 3) for x in (r["excess_h1"], *r["excess_h1_ci"]))
                                          for r in rows],
        "next-token excess at the middle layer": [round(r["excess_mid"], 3) for r in rows],
        "next-token excess at h_L": [round(sum(t - u for t, u in zip(r["details"]["top1_next_hL"],
                                                                  r["details"]["unigram_next"])) / len(r["seeds"]), 3)
                                     for r in rows],
        "pretrained departure depth (min, max)": span(r["departure_depth"] for r in d["pretrained"]),
        "minutes of training per seed (min, max)": [span(cost[r["cell"]], 0) for r in rows],
        "left: cells short of three seeds (tokens/s here, hours)": [
            (r["cell"], round(r["tokens/s"]), round(r["hours"], 1)) for r in d["left"] if r["profile"] != "paper"],
        "the paper profile's probe on one H200 (hours per cell)": sorted(
            {round(r["hours"], 1) for r in d["left"] if r["profile"] == "paper"}),
    }


NUMBERS: dict[str, Callable[[], dict[str, Any]]] = {
    "00": _nb00, "01": _nb01, "02": _nb02, "03": _nb03, "04": _nb04, "05": _nb05, "06": _nb06, "07": _nb07,
    "08": _nb08, "09": _nb09, "10": _nb10, "11": _nb11}


def numbers(notebook: str) -> dict[str, Any]:
    """Every quantity notebook ``notebook``'s findings quote, rounded as they state it."""
    if notebook not in NUMBERS:
        raise KeyError(f"no findings for notebook {notebook!r}: one of {', '.join(NUMBERS)}")
    return NUMBERS[notebook]()


def check(notebook: str, stated: dict[str, Any]) -> None:
    """Fail, naming every label, where the saved numbers no longer read as the sentences state them."""
    saved_now = numbers(notebook)
    wrong = [f"{k}: the findings say {v!r}, the saved numbers read {saved_now[k]!r}"
             for k, v in stated.items() if k in saved_now and saved_now[k] != v]
    wrong += [f"{k}: not read from the saved numbers" for k in stated.keys() - saved_now.keys()]
    wrong += [f"{k}: read ({saved_now[k]!r}) but not stated" for k in saved_now.keys() - stated.keys()]
    if wrong:
        raise AssertionError(f"notebook {notebook}'s findings and figures/ disagree:\n" + "\n".join(wrong))
