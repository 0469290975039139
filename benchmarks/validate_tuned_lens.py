"""Cross-check our logit lens and tuned-lens decode against the tuned-lens project's package (0.2.0).

The package (``pip install tuned-lens``; Belrose et al. 2023) declares heavy dependencies (wandb,
datasets, torchdata, ...) that only its training scripts import, so it is installed beside this
project without them and put on the path (``make validate-tuned-lens`` does both: the ``reference``
extra of pyproject.toml into build/tuned-lens-site, then this script):

    .venv/bin/python -m pip install --target build/tuned-lens-site --no-deps tuned-lens==0.2.0
    PYTHONPATH=build/tuned-lens-site HF_HUB_OFFLINE=1 \\
        .venv/bin/python benchmarks/validate_tuned_lens.py --json benchmarks/tuned-lens-agreement.json

On SmolLM2-135M, for every residual ``h_l`` of the report windows (the default profile's
``tuned_*`` windows, WikiText-2 validation):

- logit lens: its ``LogitLens`` (``unembed(h) = lm_head(final_norm(h))``) against our
  ``tuned_lens.decode_logits``;
- tuned lens: our translators (the closed-form start, ``tuned_lens.closed_form_start``: non-trivial
  ``W_l``, ``b_l``) loaded into its ``TunedLens`` (``tuned_lens.reference_state``), also after a
  round trip through its own ``save`` / ``from_model_and_pretrained``, against our ``TunedLens.decode``;

the largest |difference| of the logits and of the per-position KL(final || lens). Gemma-3 is
attempted too: the package's ``get_final_norm`` does not know it, and the error is recorded. If the
package cannot be imported, the JSON records why. Exits non-zero when a difference exceeds ``--atol``.
"""
from __future__ import annotations

import argparse
import importlib.metadata as md
import json
import tempfile
import traceback

import torch

from residshift.core import profiles
from residshift.core.machine import cpu_facts
from residshift.core.models import load_model
from residshift.measure import tuned_lens as T


def _versions() -> dict:
    out = {}
    for pkg in ("tuned-lens", "transformers", "torch"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = None
    return out


def _kl_rows(final: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    p = torch.log_softmax(final.double(), -1)
    return (p.exp() * (p - torch.log_softmax(logits.double(), -1))).sum(-1)


def compare(model: str, cfg: T.TunedLensConfig, tl) -> dict:
    lm, tok, info = load_model(model)
    hf = getattr(lm, "_module", lm)
    try:
        logit_ref = tl.LogitLens.from_model(hf)
    except Exception as err:  # the package's own refusal (e.g. an unknown final norm)
        return {"supported": False, "error": f"{type(err).__name__}: {err}",
                "where": traceback.extract_tb(err.__traceback__)[-1].name}
    wins = T.windows_for(tok, info, cfg)
    ours = T.TunedLens(info)
    start = T.closed_form_start(lm, info, ours, wins["train"], cfg)
    ref = tl.TunedLens.from_model(hf)
    ref.layer_translators.load_state_dict(T.reference_state(ours))
    with tempfile.TemporaryDirectory() as tmp:
        ref.save(tmp)
        loaded = tl.TunedLens.from_model_and_pretrained(hf, tmp)
    hs = T.collect_stack(lm, info, wins["val"])
    final = T.decode_logits(info, hs[-1])
    final = final.reshape(-1, final.shape[-1])  # [positions, vocab]: the model's own next-token logits
    layers = []
    with torch.no_grad():
        for l in range(info.n_layers):
            h = hs[l]
            row = {}
            for name, a, b in (("logit", logit_ref(h, idx=l), T.decode_logits(info, h)),
                               ("tuned", ref(h, idx=l), ours.decode(info, l, h)),
                               ("tuned_saved", loaded(h, idx=l), ours.decode(info, l, h))):
                a2, b2 = a.reshape(final.shape), b.reshape(final.shape)
                row[name] = {"max_abs_diff_logits": float((a2 - b2).abs().max()),
                             "identical": bool(torch.equal(a2, b2)),
                             "max_abs_diff_kl": float((_kl_rows(final, a2) - _kl_rows(final, b2)).abs().max()),
                             "mean_kl": float(_kl_rows(final, b2).mean())}
            layers.append(row)
    worst = {k: max(r[k]["max_abs_diff_logits"] for r in layers) for k in ("logit", "tuned", "tuned_saved")}
    worst_kl = {k: max(r[k]["max_abs_diff_kl"] for r in layers) for k in ("logit", "tuned", "tuned_saved")}
    return {"supported": True, "windows": len(wins["val"]), "window": cfg.window,
            "positions": int(final.shape[0]), "translators": "closed-form start on "
            f"{start['windows']} training windows", "max_abs_diff_logits": worst,
            "max_abs_diff_kl": worst_kl,
            "identical_layers": {k: sum(r[k]["identical"] for r in layers) for k in ("logit", "tuned", "tuned_saved")},
            "layers": info.n_layers, "per_layer": layers}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="smollm2-135m,gemma3-270m")
    ap.add_argument("--profile", default="default")
    ap.add_argument("--atol", type=float, default=1e-4, help="largest |difference| of logits accepted")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    out: dict = {"versions": _versions(), "cpu": cpu_facts(), "atol": args.atol, "models": {}}
    try:
        from tuned_lens.nn import lenses as tl
    except Exception as err:
        out["available"] = False
        out["why"] = f"import tuned_lens.nn.lenses failed: {type(err).__name__}: {err}"
        tl = None
    else:
        out["available"] = True
    if tl is not None:
        cfg = profiles.stage(T.TunedLensConfig, profiles.resolve(args.profile))
        for model in args.models.split(","):
            out["models"][model] = compare(model, cfg, tl)
            print(f"[validate_tuned_lens] {model}: " + json.dumps(
                {k: v for k, v in out["models"][model].items() if k != "per_layer"}), flush=True)
    ok = out["available"] and all(not m["supported"] or max(m["max_abs_diff_logits"].values()) <= args.atol
                                  for m in out["models"].values())
    out["agree"] = ok
    if args.json:
        from residshift.core.cache import atomic_write_text

        atomic_write_text(args.json, json.dumps(out, indent=2) + "\n")
    if not ok:
        raise SystemExit(out.get("why") or "the package's decode differs from ours beyond --atol")
    return out


if __name__ == "__main__":
    main()
