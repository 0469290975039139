"""Which sublayer removes the input token: direct contributions to the lens logit, block by block.

Notation as in :mod:`residshift.measure.lens` (``h_0..h_L``, ``E``, ``N``, ``x_t`` / ``x_{t+1}``,
analysed positions ``t = 1..T-2``). A block writes into the residual stream

    h_{l+1} = h_l + attn_l + mlp_l (+ skip_l)

- ``attn_l``: what the attention sublayer adds to the stream. Llama-style and GPT-2 blocks: the
  attention module's output; Gemma-2/3 blocks (sandwich norms): the output of the
  *post-attention* norm, which is what is added to the stream;
- ``mlp_l``: the same for the MLP (Gemma: the output of the post-feedforward norm);
- ``skip_l``: only in the study's own GPT (``residshift.core.models.gpt``) with a gate on the skip path:
  the skip edit ``(alpha - 1) x``, summed over the adds where it acts: ``(alpha(x) - 1) x`` once per
  block at ``site="block"``; ``(alpha(x) - 1) x + (alpha(x') - 1) x'`` at ``site="sublayer"``, with
  ``x' = alpha(x) x + attn`` the stream entering the MLP's add (so a cut ``alpha = 0`` at both adds
  shows as ``skip = -x - x'``). Computed from the block's gate, not as a remainder: the identity
  above is checked for every block of every batch (:data:`CLOSURE_TOL`).

**The quantity.** The *centred* pre-softcap lens logit of a token ``x``:
``z(h)[x] = E_x · N(h) - mean_v E_v · N(h)``, the lens logit minus its mean over the vocabulary
(a change that moves every logit equally moves no probability, so it is removed; ``centre=False``
keeps the plain logit). The decomposition is of the logit *before* any final-logit soft-cap
(``info.logit_softcap``; Gemma-2 caps at 30, Gemma-3-270M does not): the cap is monotone, so the
sign of a contribution is the sign of its effect on the capped logit, not its size.

**The linearisation.** Every final norm we meet is ``N(h) = g ⊙ P h / s(h) + b``: ``P`` the
identity (RMSNorm) or the mean-subtraction over the ``d`` coordinates (LayerNorm; a linear map),
``g`` the gain (``weight``; ``1 + weight`` for Gemma's RMSNorm), ``b`` a bias (LayerNorm with bias,
else 0), and the scale ``s(h) = sqrt(mean((P h)^2) + eps)`` (the RMS of ``h``, or its standard
deviation). With ``w_x = P (g ⊙ (E_x - Ē))`` (``Ē`` the mean row of ``E``; 0 when not centred) and
``c_x = (E_x - Ē) · b``, ``z(h)[x] = w_x · h / s(h) + c_x`` exactly. Freezing the scale at
``s_{l+1} = s(h_{l+1})``, the scale of the state the block *writes* (the one the lens reads after
the block), makes the logit linear in what the block adds:

    z_{l+1} = [w·h_l / s_{l+1} + c] + w·attn_l / s_{l+1} + w·mlp_l / s_{l+1} (+ w·skip_l / s_{l+1})

with no approximation (the linearised logit at ``h_{l+1}`` with its own scale *is* the lens logit).
What the linearisation leaves out is the change of scale from ``s_l`` to ``s_{l+1}``, reported as
its own measured term:

    rescale_l = (w·h_l) (1 / s_{l+1} - 1 / s_l),
    delta_l = z_{l+1} - z_l = attn_l + mlp_l (+ skip_l) + rescale_l      (the terms, per position)

where ``attn_l`` etc. now denote the contributions ``w·attn_l / s_{l+1}``. A growing stream
(``s_{l+1} > s_l``) shrinks every logit the stream already carried: a token can leave the lens
without any sublayer writing against it. ``delta`` is computed from the two lens logits
directly, and the remainder ``delta - sum(terms)`` (``closure``, round-off) is kept and tested.

Per window (the bootstrap unit) we keep the mean over its analysed positions of every term, for
the input token ``x_t`` and the next token ``x_{t+1}``; no vocabulary-sized tensor is ever built
(only the two rows ``w_x`` per position and ``Ē``).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch

from ..core import cache
from ..core.data import token_windows
from ..core.forward import check_ids, output_value
from ..core.models import ModelInfo
from .lens import LensOptions

WHICH = ("input", "next")
COMPONENTS = ("attn", "mlp", "skip")  # what a block adds to the stream (skip: gated GPTs only)
TERMS = (*COMPONENTS, "rescale")  # the terms of delta_l
COLUMNS = (*TERMS, "delta", "closure")  # per block l = 0..L-1; "level" is per state l = 0..L
CLOSURE_TOL = 1e-3  # max |h_{l+1} - (h_l + attn + mlp + skip)| / max |h_{l+1}| before we refuse

# Where each block family keeps the two sublayer outputs that are added to the stream (module
# names inside one decoder layer). Llama-style blocks (Mistral, Qwen2/3 share the layout) add the
# attention and MLP outputs; Gemma-2/3 add the outputs of their post-attention / post-feedforward
# norms; GPT-2 and the study's GPT add the attention and MLP outputs.
SUBLAYERS: dict[str, tuple[str, str]] = {
    "llama": ("self_attn", "mlp"),
    "mistral": ("self_attn", "mlp"),
    "qwen2": ("self_attn", "mlp"),
    "qwen3": ("self_attn", "mlp"),
    "gemma2": ("post_attention_layernorm", "post_feedforward_layernorm"),
    "gemma3_text": ("post_attention_layernorm", "post_feedforward_layernorm"),
    "gpt2": ("attn", "mlp"),
    "residshift-gpt": ("attn", "mlp"),
}


class AttributionError(ValueError):
    """Bad input to the attribution; the message names the fix."""


# --------------------------------------------------------------------------------------------
# The final norm, written as g ⊙ P h / s(h) + b
# --------------------------------------------------------------------------------------------


@dataclass
class NormParts:
    """The final norm as ``N(h) = gain ⊙ P h / scale(h) + bias`` (``P``: mean-subtraction when
    ``centred``, else the identity; ``scale(h) = sqrt(mean((P h)^2) + eps)``), in float64."""

    kind: str  # "rmsnorm" | "rmsnorm (1 + weight)" | "layernorm"
    gain: torch.Tensor  # [d]
    bias: torch.Tensor | None  # [d] or None
    eps: float
    centred: bool

    def project(self, h: torch.Tensor) -> torch.Tensor:
        """``P h``: ``h`` minus its mean over the last axis (LayerNorm), or ``h`` (RMSNorm)."""
        return h - h.mean(-1, keepdim=True) if self.centred else h

    def scale(self, h: torch.Tensor) -> torch.Tensor:
        """``s(h) = sqrt(mean((P h)^2) + eps)`` over the last axis (shape ``h.shape[:-1]``)."""
        p = self.project(h.double())
        return (p.pow(2).mean(-1) + self.eps).sqrt()

    def apply(self, h: torch.Tensor) -> torch.Tensor:
        """``N(h)`` from the parts (float64); equals the model's final norm (checked on load)."""
        h = h.double()
        out = self.gain * self.project(h) / self.scale(h)[..., None]
        return out + self.bias if self.bias is not None else out


def norm_parts(info: ModelInfo, *, atol: float = 1e-4) -> NormParts:
    """Read ``info.final_norm`` as :class:`NormParts` and check it on random states.

    Understands ``torch.nn.LayerNorm`` (with or without affine parameters) and RMSNorms with a
    ``weight`` and ``eps`` / ``variance_epsilon`` (gain ``weight``, as Llama, or ``1 + weight``, as
    Gemma: the one that reproduces the module is kept). Anything else raises, naming the fix.
    """
    norm = info.final_norm
    d = info.d_model
    weight = getattr(norm, "weight", None)
    w = torch.ones(d, dtype=torch.float64) if weight is None else weight.detach().double().cpu()
    if isinstance(norm, torch.nn.LayerNorm):
        bias = norm.bias.detach().double().cpu() if getattr(norm, "bias", None) is not None else None
        candidates = [NormParts("layernorm", w, bias, float(norm.eps), True)]
    else:
        eps = getattr(norm, "variance_epsilon", getattr(norm, "eps", None))
        if weight is None or eps is None:
            candidates = []
        else:
            candidates = [NormParts("rmsnorm", w, None, float(eps), False),
                          NormParts("rmsnorm (1 + weight)", 1.0 + w, None, float(eps), False)]
    g = torch.Generator().manual_seed(0)
    probe = torch.randn(4, d, generator=g) * torch.tensor([[0.1], [1.0], [10.0], [100.0]])
    probe = probe.to(info.embedding.device, info.embedding.dtype)
    with torch.no_grad():
        want = norm(probe).double().cpu()
    for parts in candidates:
        if torch.allclose(parts.apply(probe.cpu()), want, atol=atol, rtol=1e-4):
            return parts
    raise AttributionError(
        f"the final norm of {info.name} ({type(norm).__name__}) is neither a LayerNorm nor an RMSNorm "
        "with gain weight or 1 + weight (checked on random states): add its form g * P h / s(h) + b "
        "to residshift.measure.attribution.norm_parts before attributing its lens logits"
    )


# --------------------------------------------------------------------------------------------
# One batch: the stream and what each sublayer adds
# --------------------------------------------------------------------------------------------


def sublayer_paths(info: ModelInfo) -> tuple[str, str]:
    """The two modules of a decoder layer whose outputs are added to the stream (:data:`SUBLAYERS`)."""
    if info.family not in SUBLAYERS:
        raise AttributionError(
            f"{info.name} is a {info.family!r} model; the attribution knows where the sublayer outputs "
            f"of {sorted(SUBLAYERS)} blocks are added to the stream. Read the block's forward and add "
            f"(attention module, MLP module) for {info.family!r} to residshift.measure.attribution.SUBLAYERS"
        )
    return SUBLAYERS[info.family]


def skip_edit(block: torch.nn.Module, x: torch.Tensor, attn: torch.Tensor) -> torch.Tensor | None:
    """The skip edit of one block of the study's GPT: ``(alpha - 1) x`` at each add it acts on
    (module docstring); None where the block has a plain skip (every pretrained block)."""
    if getattr(block, "backout", None) is not None:
        raise AttributionError("a backout block also subtracts lambda h_k, a fourth contributor this "
                               "attribution does not split off: leave the backout variant out")
    gate = getattr(block, "gate", None)
    if gate is None:
        return None
    with torch.no_grad():
        e = (gate(x) - 1) * x
        if getattr(block, "per_sublayer", False):
            x1 = x + attn + e
            e = e + (gate(x1) - 1) * x1
    return e


def _first(x):
    x = output_value(x)
    return x[0] if isinstance(x, tuple) else x


def collect_sublayers(lm, info: ModelInfo, ids) -> dict[str, torch.Tensor]:
    """One trace of ``ids [B, T]``: ``h [L+1, B, T, d]`` and ``attn``, ``mlp``, ``skip``
    ``[L, B, T, d]`` (``skip`` zeros on a plain skip path), float32, and ``closure``: the largest
    ``|h_{l+1} - (h_l + attn + mlp + skip)|`` relative to ``max |h_{l+1}|`` over the blocks.

    Raises :class:`AttributionError` when that exceeds :data:`CLOSURE_TOL` (the block adds
    something the decomposition misses).
    """
    ids = check_ids(ids, info)
    a_path, m_path = sublayer_paths(info)
    ins, attns, mlps, outs = [], [], [], []
    with torch.no_grad():
        with lm.trace(ids, remote=bool(info.remote)) as tracer:
            for layer in info.layer_envoys(lm):  # execution order: input, attention, MLP, output
                ins.append(layer.input.save())
                attns.append(getattr(layer, a_path).output.save())
                mlps.append(getattr(layer, m_path).output.save())
                outs.append(layer.output.save())
            if not info.remote:
                tracer.stop()
    xs = [_first(v).float() for v in ins]
    a = [_first(v).float() for v in attns]
    m = [_first(v).float() for v in mlps]
    ys = [_first(v).float() for v in outs]
    skips, closure = [], 0.0
    for l, block in enumerate(info.layers):
        e = skip_edit(block, xs[l], a[l])
        skips.append(torch.zeros_like(xs[l]) if e is None else e.float())
        gap = (ys[l] - (xs[l] + a[l] + m[l] + skips[l])).abs().max() / ys[l].abs().max().clamp_min(1e-12)
        closure = max(closure, float(gap))
    if closure > CLOSURE_TOL:
        raise AttributionError(
            f"{info.name}: a block's output differs from input + attention + MLP (+ skip edit) by "
            f"{closure:.2g} of its size: the block adds something else (a residual scale, a backout, "
            f"another sublayer). Check SUBLAYERS[{info.family!r}] against the block's forward")
    return {"h": torch.stack([xs[0], *ys]), "attn": torch.stack(a), "mlp": torch.stack(m),
            "skip": torch.stack(skips), "closure": closure}


def directions(info: ModelInfo, parts: NormParts, tokens: torch.Tensor, *, centre: bool = True,
               e_mean: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``w_x = P (g ⊙ (E_x - Ē))`` ``[..., d]`` and ``c_x = (E_x - Ē) · b`` ``[...]`` (float64) for
    token ids ``tokens``: ``z(h)[x] = w_x · h / s(h) + c_x`` (module docstring)."""
    E = info.embedding.detach()
    e = E[tokens.to(E.device)].double().cpu()
    if centre:
        e = e - (E.double().mean(0).cpu() if e_mean is None else e_mean)
    w = parts.project(parts.gain * e)
    c = e @ parts.bias if parts.bias is not None else torch.zeros(e.shape[:-1], dtype=torch.float64)
    return w, c


def attribution_terms(info: ModelInfo, parts: NormParts, stream: Mapping[str, torch.Tensor],
                      ids: torch.Tensor, where: torch.Tensor, *, centre: bool = True,
                      e_mean: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Per position: ``{f"{term}_{which}": [L, B, P]}`` for the terms of :data:`COLUMNS` and
    ``{f"level_{which}": [L+1, B, P]}`` (the centred pre-softcap lens logit ``z_l``), float64, at
    the analysed positions ``where`` (``[P]``) of ``ids [B, T]``; ``stream`` from
    :func:`collect_sublayers`."""
    h = stream["h"][:, :, where].double()  # [L+1, B, P, d]
    s = parts.scale(h)  # [L+1, B, P]
    x = torch.stack([ids[:, where], ids[:, where + 1]], -1)  # [B, P, 2]: input, next
    w, c = directions(info, parts, x, centre=centre, e_mean=e_mean)  # [B, P, 2, d], [B, P, 2]
    proj = torch.einsum("lbpd,bpjd->lbpj", h, w)  # one batched matmul per position, both tokens
    inv = (1 / s)[..., None]  # [L+1, B, P, 1]
    level = proj * inv + c
    terms = {k: torch.einsum("lbpd,bpjd->lbpj", stream[k][:, :, where].double(), w) * inv[1:]
             for k in COMPONENTS}
    terms["rescale"] = proj[:-1] * (inv[1:] - inv[:-1])
    terms["delta"] = level[1:] - level[:-1]
    terms["closure"] = terms["delta"] - sum(terms[k] for k in TERMS)
    out: dict[str, torch.Tensor] = {}
    for j, which in enumerate(WHICH):
        out.update({f"{k}_{which}": v[..., j] for k, v in terms.items()})
        out[f"level_{which}"] = level[..., j]
    return out


# --------------------------------------------------------------------------------------------
# Over a corpus
# --------------------------------------------------------------------------------------------


@cache.storable
@dataclass
class AttributionResult:
    """What a corpus pass keeps (CPU tensors, float64).

    - ``per_seq[f"{term}_{which}"]``: ``[n_seq, L]`` per block ``l`` (``h_l -> h_{l+1}``), mean
      over a window's analysed positions, for ``term`` in :data:`COLUMNS` and ``which`` in
      :data:`WHICH`; ``per_seq[f"level_{which}"]``: ``[n_seq, L+1]`` per state;
    - ``components``: the contributors this model has (``attn``, ``mlp``, and ``skip`` for a GPT
      with a gated skip path);
    - ``closure``: the largest stream-level closure gap of any block and batch (relative), and
      ``max_closure_logit``: the largest ``|delta - sum(terms)|`` of any position (logit units).
    """

    model: str
    n_layers: int
    components: tuple[str, ...]
    per_seq: dict[str, torch.Tensor]
    closure: float
    max_closure_logit: float
    n_positions: int
    norm: str
    centre: bool
    config: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def n_seq(self) -> int:
        return next(iter(self.per_seq.values())).shape[0]


def has_gates(info: ModelInfo) -> bool:
    """Whether any block carries a skip-path gate (the skip edit is then reported)."""
    return any(getattr(b, "gate", None) is not None for b in info.layers)


def corpus_attribution(lm, info: ModelInfo, windows: torch.Tensor, *, batch: int = 8,
                       positions: int | None = None, seed: int = 0, centre: bool = True,
                       progress: Callable[[int, int], None] | None = None) -> AttributionResult:
    """The attribution over ``windows [n, T]`` in batches of ``batch``: one trace per batch,
    analysed positions as the lens's (``positions``/``seed``: a seeded subset of ``1..T-2``)."""
    windows = check_ids(windows, info)
    if not isinstance(batch, int) or batch < 1:
        raise AttributionError(f"batch must be a positive int, got {batch!r}")
    if windows.shape[0] < 1:
        raise AttributionError("no windows to attribute: pass n >= 1 windows")
    parts = norm_parts(info)
    E = info.embedding.detach()
    e_mean = E.double().mean(0).cpu() if centre else None
    where = LensOptions(metrics=("logprob",), positions=positions, seed=seed).position_index(windows.shape[1])
    sums: dict[str, list] = {}
    closure, worst = 0.0, 0.0
    t0, n = time.perf_counter(), windows.shape[0]
    for start in range(0, n, batch):
        ids = windows[start:start + batch]
        stream = collect_sublayers(lm, info, ids)
        closure = max(closure, stream["closure"])
        terms = attribution_terms(info, parts, stream, ids, where, centre=centre, e_mean=e_mean)
        del stream
        for k, v in terms.items():
            sums.setdefault(k, []).append(v.mean(-1).T)  # [B, L] or [B, L+1]
        worst = max(worst, max(float(terms[f"closure_{w}"].abs().max()) for w in WHICH))
        if progress:
            progress(min(n, start + batch), n)
    comps = ("attn", "mlp", "skip") if has_gates(info) else ("attn", "mlp")
    return AttributionResult(model=info.name, n_layers=info.n_layers, components=comps,
                             per_seq={k: torch.cat(v) for k, v in sums.items()}, closure=closure,
                             max_closure_logit=worst, n_positions=int(where.numel()), norm=parts.kind,
                             centre=centre, seconds=time.perf_counter() - t0)


def run_attribution(lm, info: ModelInfo, tokenizer, *, corpus: str, split: str, window: int, n: int,
                    seed: int = 0, batch: int = 8, positions: int | None = None, centre: bool = True,
                    bos: bool | None = None, detokenize: bool = True, refresh: bool = False,
                    verbose: bool = False) -> AttributionResult:
    """The cached corpus pass: ``n`` seeded windows of ``window`` tokens of a named corpus split
    (``core.data.token_windows``, the lens's windows for the same arguments) through
    :func:`corpus_attribution`. Cached under ``results/sublayer-attribution`` by (model, source,
    corpus, split, window, n, seed, positions, centre, BOS, detokenization) and the code."""
    for name, v in (("window", window), ("n", n)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise AttributionError(f"{name} must be a positive int, got {v!r}")
    if window < 3:
        raise AttributionError(f"window {window} is too short: analysed positions are 1..T-2, so T >= 3")
    config = {"model": info.name, "source": info.source, "corpus": corpus, "split": split,
              "window": int(window), "n": int(n), "seed": int(seed), "positions": positions,
              "centre": bool(centre), "bos": info.prepend_bos if bos is None else bool(bos),
              "detokenize": bool(detokenize)}

    def compute() -> AttributionResult:
        windows = token_windows(corpus, split, tokenizer, length=window, n=n, seed=seed,
                                prepend_bos=config["bos"], detokenize=detokenize)
        prog = (lambda done, total: print(f"  {info.name}: {done}/{total} windows", flush=True)) if verbose else None
        res = corpus_attribution(lm, info, windows, batch=batch, positions=positions, seed=seed,
                                 centre=centre, progress=prog)
        res.config = config
        return res

    return cache.cached("sublayer-attribution", config, compute, code=run_attribution, refresh=refresh)
