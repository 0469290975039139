"""The logit lens, streamed: per-layer alignment of the residual stream with the input and next token.

Notation (ours, used in every notebook):

- ``h_0(t)`` is the input of decoder layer 0 at position ``t`` (the scaled token embedding, plus
  position embeddings where the model adds them); ``h_l(t)`` the output of layer ``l - 1``,
  ``l = 1..L``.
- ``E`` is the tied embedding matrix ``[vocab, d]``, ``N`` the model's final norm, ``x_t`` the
  current (input) token and ``x_{t+1}`` the next token, i.e. the one the loss at ``t`` asks for.
- Logit lens: ``logits_l(t) = softcap(E · N(D_l(h_l(t))))`` where ``D_l`` is an optional decoder
  (a ``(layer, h) -> h'`` hook; identity for the plain logit lens, a tuned-lens translator
  otherwise) and ``softcap(z) = c·tanh(z / c)`` where the model has a final-logit soft-cap ``c``.
  ``logits_L`` equals the model's own logits (tested).

Metrics, per layer ``l`` and position ``t``, for ``x = x_t`` ("input") and ``x = x_{t+1}``
("next") — :data:`METRICS` lists them:

- ``rank``: ``1 + #{v : logits_l(t)[v] > logits_l(t)[x]}`` (1 = top; computed by counting the
  logits strictly greater, never by sorting the vocabulary); ``logrank`` is ``log10(rank)``;
- ``logprob`` / ``prob``: ``log softmax(logits_l(t))[x]`` and its exponential;
- ``top1``: 1 when ``rank == 1`` (no token scores strictly higher than ``x``), else 0;
- ``cos_raw``: ``cos(h_l(t), e_x)``; ``cos_norm``: ``cos(N(D_l(h_l(t))), e_x)``;
- ``cos_centred``: ``cos(h_l(t) - mu_l, e_x - e_mean)`` with ``e_mean`` the mean row of ``E`` and
  ``mu_l`` the mean of ``h_l`` over the analysed positions of the same batch (a few very large
  residual dimensions, shared by all positions, otherwise dominate the raw cosine);
- ``proj``: the scalar projection ``N(D_l(h_l(t))) · e_x / ||e_x||``;

and two that do not depend on ``x``: ``entropy`` of the lens distribution (nats) and
``kl_final`` = ``KL(p_L || p_l)``, from the model's final distribution to the layer's (nats).

The oracle: :func:`reference_metrics` (on :func:`reference_logits`) computes every column above
the plain way — the model's own final norm and tied matrix, the full logits of every layer and
position, ``log_softmax``, ranks by counting — in a few lines of torch, with no chunking, fusion or
compiling, and without :class:`~residshift.core.unembed.Unembed`. Every fast path
(:func:`residual_metrics` in any chunking, its eager and compiled kernels, :func:`lens_logits`,
:func:`decode_top`, :func:`corpus_metrics` and :func:`run_lens`) is tested against it, and
``benchmarks/bench_lens.py`` times and checks the streamed pass against it.

Analysed positions: ``t = 1 .. T-2`` of every window (0-based). Position 0 is dropped because it
is the BOS token (Gemma) or a context-free attention-sink position (SmolLM2); the last position
has no next token. Optionally (``positions=k``) only a seeded random subset of ``k`` of those
positions is analysed in every window (the same subset in every window), with the full window as
context: the forward pass is cheap and the unembedding is not, so more windows with fewer analysed
positions give a better bootstrap over windows for the same compute.

Streaming: :func:`corpus_metrics` runs one nnsight trace per batch to save ``h_0..h_L`` (small:
``(L+1)·B·T·d``), then unembeds one layer and one chunk of positions at a time, so no
``layers × positions × vocab`` tensor ever exists and memory does not grow with the corpus. It
keeps per-sequence per-layer means (and medians of ranks) for the bootstrap in :mod:`.stats`, and
a compact per-token table for breakdowns by token type.
"""
from __future__ import annotations

import os
import time
import unicodedata
import warnings
from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable, Iterable, Mapping

import numpy as np
import torch

from ..core import cache, profiles
from ..core.data import corpus_text, token_windows, tokenize_text
from ..core.forward import check_ids, collect_residuals
from ..core.interventions import attenuation_plan
from ..core.models import ModelInfo, model_fingerprint
from ..core.unembed import Unembed, UnembedError, matmul_dtype, softcap

Decoder = Callable[[int, torch.Tensor], torch.Tensor]

PAIRED: dict[str, str] = {
    "rank": "1 + number of vocabulary logits strictly greater than the token's (1 = top-1)",
    "logrank": "log10 of rank",
    "logprob": "log-probability of the token under the lens distribution (nats)",
    "prob": "probability of the token under the lens distribution",
    "top1": "1 if no token has a strictly greater lens logit than the token, else 0",
    "cos_raw": "cos(h_l, e_x): raw residual vs the token's embedding row",
    "cos_norm": "cos(N(D(h_l)), e_x): final-normed (decoded) residual vs the embedding row",
    "cos_centred": "cos(h_l - mean_l, e_x - mean(E)): both centred (mean_l over the batch)",
    "proj": "N(D(h_l)) . e_x / ||e_x||: scalar projection on the embedding row",
}
SINGLE: dict[str, str] = {
    "entropy": "entropy of the lens distribution (nats)",
    "kl_final": "KL(p_final || p_layer) in nats, p_final = the model's own output distribution",
}
METRICS: dict[str, str] = {**PAIRED, **SINGLE}
WHICH = ("input", "next")
# Orientation for "alignment": +1 when larger means more aligned with the token, -1 otherwise.
ORIENTATION = {"rank": -1, "logrank": -1, "logprob": 1, "prob": 1, "top1": 1, "cos_raw": 1,
               "cos_norm": 1, "cos_centred": 1, "proj": 1}
# Metrics whose value comes from the lens distribution (need the unembedding matmul).
_LOGIT_METRICS = {"rank", "logrank", "logprob", "prob", "top1", "entropy", "kl_final"}
TOKEN_TABLE_DEFAULT = ("rank_input", "rank_next", "logprob_input", "logprob_next")


class LensError(ValueError):
    """Bad input to the lens; the message names the fix."""


def check_metrics(metrics: Iterable[str] | None) -> tuple[str, ...]:
    """Validate metric names (None = all); unknown names raise, listing the known ones."""
    if metrics is None:
        return tuple(METRICS)
    if isinstance(metrics, str):
        metrics = [metrics]
    metrics = tuple(metrics)
    unknown = [m for m in metrics if m not in METRICS]
    if unknown:
        raise LensError(
            f"unknown metric(s) {unknown}; known metrics: {', '.join(METRICS)} "
            "(paired ones are reported for the input and the next token)"
        )
    if not metrics:
        raise LensError(f"no metric asked for; pick some of: {', '.join(METRICS)}")
    return tuple(dict.fromkeys(metrics))


def metric_columns(metrics: Iterable[str]) -> list[str]:
    """Per-token column names: ``<paired>_input``, ``<paired>_next``, and the single metrics."""
    cols = []
    for m in check_metrics(metrics):
        cols += [f"{m}_{w}" for w in WHICH] if m in PAIRED else [m]
    return cols


def encode(tokenizer, info: ModelInfo, text: str) -> torch.Tensor:
    """Token ids ``[1, T]`` of ``text`` as the model saw its training data (BOS per the model)."""
    if not isinstance(text, str) or not text.strip():
        raise LensError("the text is empty; pass a sentence of a few words")
    ids = tokenizer(text, add_special_tokens=False).input_ids
    if info.prepend_bos:
        ids = [info.bos_token_id] + ids
    if len(ids) < 3:
        raise LensError(
            f"{text!r} is {len(ids)} token(s) long; the lens needs at least 3 (position 0 is "
            "dropped and each analysed position needs a next token): pass a longer text"
        )
    return torch.tensor([ids], dtype=torch.long)


# --------------------------------------------------------------------------------------------
# The lens on saved residuals
# --------------------------------------------------------------------------------------------


def normed(info: ModelInfo, h: torch.Tensor, layer: int, decoder: Decoder | None = None) -> torch.Tensor:
    """``N(D_l(h))``: the decoded, final-normed residual that the lens unembeds."""
    with torch.no_grad():
        if decoder is not None:
            h = decoder(layer, h)
        return info.final_norm(h).float()  # Unembed.norm, without building a head (a copy of E when E is not fp32)


def lens_logits(info: ModelInfo, h: torch.Tensor, layer: int, *, decoder: Decoder | None = None,
                matmul_dtype: str = "float32") -> torch.Tensor:
    """``softcap(E · N(D_l(h)))`` for a residual ``h`` of layer ``layer`` (small inputs only)."""
    if not 0 <= layer <= info.n_layers:
        raise LensError(f"layer {layer} out of range: the residual stream of {info.name} has "
                        f"layers 0..{info.n_layers}")
    with torch.no_grad():
        return Unembed(info, dtype=matmul_dtype).logits(normed(info, h, layer, decoder))


def decode_top(lm, info: ModelInfo, ids, *, k: int = 1, decoder: Decoder | None = None,
               attenuation=None, remote: bool = False) -> dict[str, torch.Tensor]:
    """Top-``k`` lens tokens per layer and position of a short batch (for the worked examples).

    Returns ``{"ids": [L+1, B, T, k], "probs": [L+1, B, T, k], "model_logits": [B, T, V]}``.
    Every layer is unembedded in one pass over the vocabulary in chunks of ``DECODE_CHUNK`` rows of
    ``E`` (a running top-``k`` and log-sum-exp), so the matrix is read once, not once per layer
    (``benchmarks/bench_decode_top.py``: Gemma-3's 262k x 640 matrix).
    """
    ids = check_ids(ids, info, min_len=1)
    if info.remote or remote:  # decoded inside the trace: a remote model's E and norm are not here
        _local_parts_refused(decoder, attenuation)
        from .remote_lens import traced_top
        return traced_top(lm, info, ids, k=k, remote=info.remote or remote)
    hs, logits = collect_residuals(lm, info, ids, attenuation=attenuation, remote=remote,
                                   return_logits=True)
    top_i, probs = top_tokens(info, hs, k=k, decoder=decoder)
    return {"ids": top_i, "probs": probs, "model_logits": logits}


def top_tokens(info: ModelInfo, hs, *, k: int = 1, decoder: Decoder | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids, probs)`` ``[L+1, B, T, k]``: the top-``k`` lens tokens of saved residuals ``hs``
    (``hs[l]``: ``h_l`` ``[B, T, d]``), every layer in one chunked pass (:func:`decode_top`'s core)."""
    z = torch.stack([normed(info, hs[l], l, decoder) for l in range(info.n_layers + 1)])  # [L+1, B, T, d]
    top_v, top_i, lse = _chunked_top(Unembed(info), z.reshape(-1, z.shape[-1]), k)
    shape = (*z.shape[:-1], k)
    return top_i.reshape(shape), torch.exp(top_v - lse[:, None]).reshape(shape)


DECODE_CHUNK = 32768  # vocabulary rows per matmul in decode_top


def _chunked_top(head: Unembed, z: torch.Tensor, k: int, chunk: int | None = None):
    """Top-``k`` logits (values, ids) and the log-sum-exp of every row of ``softcap(z · E^T)``,
    reading ``E`` in chunks of ``chunk`` rows."""
    V, chunk = head.weight.shape[0], chunk or DECODE_CHUNK
    if k > V:
        raise LensError(f"k={k} exceeds the vocabulary ({V} tokens)")
    best_v = best_i = lse = None
    with torch.no_grad():
        for start in range(0, V, chunk):
            lg = softcap(torch.nn.functional.linear(z.to(head.dtype), head.weight[start:start + chunk]).float(),
                         head.cap)
            v, i = lg.topk(min(k, lg.shape[-1]), dim=-1)
            part = torch.logsumexp(lg, -1)
            if best_v is None:
                best_v, best_i, lse = v, i + start, part
                continue
            v, pick = torch.cat([best_v, v], -1).topk(k, dim=-1)
            best_i = torch.cat([best_i, i + start], -1).gather(-1, pick)
            best_v, lse = v, torch.logaddexp(lse, part)
    return best_v, best_i, lse


# --------------------------------------------------------------------------------------------
# The reference lens: the oracle every fast path is tested against
# --------------------------------------------------------------------------------------------


def reference_logits(info: ModelInfo, h: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The oracle's head: ``softcap(E · N(h))`` for residuals ``h [..., d]`` (any leading shape).

    The model's own final-norm module and tied matrix (``info.final_norm``, ``info.embedding``),
    the matmul and the soft-cap in ``dtype``; nothing of :class:`Unembed`.
    """
    with torch.no_grad():
        logits = info.final_norm(h).to(dtype) @ info.embedding.detach().to(dtype).T
    cap = info.logit_softcap
    return cap * torch.tanh(logits / cap) if cap else logits


def reference_metrics(info: ModelInfo, hs: torch.Tensor, ids: torch.Tensor, *,
                      decoder: Decoder | None = None, dtype: torch.dtype = torch.float32,
                      ) -> dict[str, torch.Tensor]:
    """The oracle: every column of :func:`residual_metrics`, ``{column: [L+1, B, T-2]}`` at
    ``t = 1..T-2``, from residuals ``hs [L+1, B, T, d]`` and ids ``[B, T]``, the plain way.

    Per layer, the full logits of every position (:func:`reference_logits`), ``log_softmax``,
    ``rank = 1 + #{logits strictly greater}``, torch's own cosine. Slow, and ``B·T·vocab`` floats
    per layer: for checks on small inputs. Every fast path is tested against it.
    """
    E, cols = info.embedding.detach().float(), {}
    tokens = {"input": ids[:, 1:-1], "next": ids[:, 2:]}
    mu = hs[:, :, 1:].mean(dim=(1, 2))  # cos_centred's centre: positions 1..T-1 of the batch
    lp_final = torch.log_softmax(reference_logits(info, hs[-1, :, 1:-1], dtype), -1)
    cos = torch.nn.functional.cosine_similarity
    with torch.no_grad():
        for l, h in enumerate(hs[:, :, 1:-1]):
            hd = decoder(l, h) if decoder is not None else h
            z, logits = info.final_norm(hd).float(), reference_logits(info, hd, dtype)
            lp = torch.log_softmax(logits, -1)
            for which, x in tokens.items():
                e, x1 = E[x], x[..., None]
                rank = ((logits > logits.gather(-1, x1)).sum(-1) + 1).float()
                lpx = lp.gather(-1, x1)[..., 0]
                row = {"rank": rank, "logrank": rank.log10(), "logprob": lpx, "prob": lpx.exp(),
                       "top1": (rank == 1).float(), "cos_raw": cos(h, e, dim=-1),
                       "cos_norm": cos(z, e, dim=-1), "cos_centred": cos(h - mu[l], e - E.mean(0), dim=-1),
                       "proj": (z * e).sum(-1) / e.norm(dim=-1)}
                for m, v in row.items():
                    cols.setdefault(f"{m}_{which}", []).append(v)
            cols.setdefault("entropy", []).append(-(lp.exp() * lp).sum(-1))
            cols.setdefault("kl_final", []).append((lp_final.exp() * (lp_final - lp)).sum(-1))
    return {c: torch.stack(cols[c]) for c in metric_columns(METRICS)}


@dataclass
class LensOptions:
    """How the streamed pass runs (none of these change the definitions of the metrics)."""

    metrics: tuple[str, ...] = tuple(METRICS)
    # max positions × vocab in one unembedding chunk: 2^26 (256-1,365 rows for these vocabularies) keeps
    # the GEMM near the CPU's rate; the rows' logits, hence every metric, are bit-identical to 2^24's
    # under MKL_CBWR=AVX2,STRICT (benchmarks/bench_lens_chunks.py)
    chunk_elems: int = 1 << 26
    matmul_dtype: str = "float32"  # "bfloat16" for a faster unembedding matmul on CPUs with BF16
    token_table: tuple[str, ...] | None = None  # None: the computed ones of TOKEN_TABLE_DEFAULT
    positions: int | None = None  # analyse this many positions per window (None: all of 1..T-2)
    seed: int = 0  # which positions, when ``positions`` is set

    def __post_init__(self):
        self.metrics = check_metrics(self.metrics)
        cols = metric_columns(self.metrics)
        if self.token_table is None:
            self.token_table = tuple(c for c in TOKEN_TABLE_DEFAULT if c in cols)
        self.token_table = tuple(self.token_table)
        missing = [c for c in self.token_table if c not in cols]
        if missing:
            raise LensError(f"token_table columns {missing} are not computed; computed: {cols}")
        try:
            matmul_dtype(self.matmul_dtype)
        except UnembedError as err:
            raise LensError(str(err)) from None
        if self.chunk_elems < 1:
            raise LensError("chunk_elems must be positive")
        if self.positions is not None and self.positions < 1:
            raise LensError("positions must be None (all) or at least 1")

    def position_index(self, T: int) -> torch.Tensor:
        """The analysed positions of a window of ``T`` tokens (sorted; shared by all windows).

        All of ``1..T-2``, or, with ``positions = k``, ``k`` of them drawn without replacement with
        ``seed``: the forward pass is cheap and the unembedding is not, so analysing a random subset
        of positions of many windows buys a better bootstrap over windows for the same compute.
        """
        every = torch.arange(1, T - 1)
        if self.positions is None or self.positions >= every.numel():
            return every
        g = torch.Generator().manual_seed(self.seed)
        return every[torch.randperm(every.numel(), generator=g)[: self.positions]].sort().values


def residual_metrics(info: ModelInfo, hs: torch.Tensor, ids: torch.Tensor, *,
                     decoder: Decoder | None = None, options: LensOptions | None = None,
                     ) -> dict[str, torch.Tensor]:
    """Per-token metrics ``{column: [L+1, B, P]}`` from saved residuals ``hs = [L+1, B, T, d]``.

    Analysed positions: ``t = 1..T-2`` (``P = T-2``; see the module docstring), or the seeded subset
    of ``options.positions`` of them. Streams over chunks of positions and layers; the largest
    temporary is ``chunk × vocab``. Per chunk and layer: one unembedding matmul, then every
    distribution metric from one fused function (:func:`_chunk_stats`; compiled with
    ``torch.compile`` for large passes, see :data:`COMPILE`).
    """
    opt = options or LensOptions()
    metrics = set(opt.metrics)
    L1, B, T, d = hs.shape
    if L1 != info.n_layers + 1:
        raise LensError(f"expected {info.n_layers + 1} residual layers for {info.name}, got {L1}")
    ids = check_ids(ids, info)
    if ids.shape != (B, T):
        raise LensError(f"ids {tuple(ids.shape)} do not match residuals {(B, T)}")
    ids = ids.to(hs.device)  # windows arrive on the CPU; the residuals are where the model runs
    where = opt.position_index(T)
    P_ = where.numel()
    cur = ids[:, where].reshape(-1)
    nxt = ids[:, where + 1].reshape(-1)
    n = cur.numel()
    h_pos = hs[:, :, where, :].reshape(L1, n, d)
    out = {c: torch.empty(L1, n, device=hs.device) for c in metric_columns(opt.metrics)}  # one transfer, at the end

    E = info.embedding.detach().float()
    need_logits = bool(metrics & _LOGIT_METRICS)
    need_norm = need_logits or bool(metrics & {"cos_norm", "proj"})
    need_dist = bool(metrics & {"logprob", "prob", "entropy", "kl_final"})
    if metrics & {"cos_raw", "cos_norm", "proj", "cos_centred"}:
        e_cur, e_nxt = E[cur], E[nxt]
        e_norm_cur, e_norm_nxt = e_cur.norm(dim=-1), e_nxt.norm(dim=-1)
    if "cos_centred" in metrics:
        e_mean = E.mean(0)
        ec_cur, ec_nxt = e_cur - e_mean, e_nxt - e_mean
        mu = hs[:, :, 1:, :].reshape(L1, -1, d).mean(1)  # [L+1, d], position 0 excluded
    head = Unembed(info, dtype=opt.matmul_dtype) if need_logits else None
    V = info.vocab_size
    rows = max(1, min(n, _chunk_elems(opt, hs.device) // V))
    stats_fn = final_fn = None
    if need_logits:
        stats_fn, final_fn = _kernels(_WORK_HINT.get(n) * L1 * V)
    targets = torch.stack([cur, nxt], 1)  # [n, 2]

    with torch.no_grad():
        for s in range(0, n, rows):
            sl = slice(s, min(n, s + rows))
            idx = targets[sl].clone()  # a fresh tensor: compiled guards need no view bookkeeping
            final = raw_last = None
            if "kl_final" in metrics:  # the model's own distribution: h_L without decoder
                raw_last = _raw_logits(head, info.final_norm(h_pos[-1, sl]).float())
                final = final_fn(raw_last, head.cap)
            for l in range(L1):
                h = h_pos[l, sl]
                z = normed(info, h, l, decoder) if need_norm else None
                if metrics & {"cos_raw"}:
                    out["cos_raw_input"][l, sl] = _cos(h, e_cur[sl], e_norm_cur[sl])
                    out["cos_raw_next"][l, sl] = _cos(h, e_nxt[sl], e_norm_nxt[sl])
                if "cos_centred" in metrics:
                    hc = h - mu[l]
                    out["cos_centred_input"][l, sl] = torch.nn.functional.cosine_similarity(hc, ec_cur[sl], dim=-1)
                    out["cos_centred_next"][l, sl] = torch.nn.functional.cosine_similarity(hc, ec_nxt[sl], dim=-1)
                if "cos_norm" in metrics:
                    out["cos_norm_input"][l, sl] = _cos(z, e_cur[sl], e_norm_cur[sl])
                    out["cos_norm_next"][l, sl] = _cos(z, e_nxt[sl], e_norm_nxt[sl])
                if "proj" in metrics:
                    out["proj_input"][l, sl] = (z * e_cur[sl]).sum(-1) / e_norm_cur[sl]
                    out["proj_next"][l, sl] = (z * e_nxt[sl]).sum(-1) / e_norm_nxt[sl]
                if not need_logits:
                    continue
                # layer L without a decoder is the head kl_final read: not computed twice
                raw = raw_last if l == L1 - 1 and decoder is None and raw_last is not None else _raw_logits(head, z)
                stats = stats_fn(raw, idx, final, head.cap, need_dist)
                del raw
                _store(stats, metrics, out, l, sl)
    return {k: v.reshape(L1, B, P_).cpu() for k, v in out.items()}


def _chunk_elems(opt: "LensOptions", device: torch.device) -> int:
    """Positions × vocabulary in one unembedding chunk: ``opt.chunk_elems`` on a CPU; on a GPU as much
    as a sixteenth of its free memory holds in fp32 (a chunk has a few vocabulary-sized temporaries),
    and never less than ``opt.chunk_elems``."""
    if device.type != "cuda":
        return opt.chunk_elems
    free, _ = torch.cuda.mem_get_info(device)
    return max(opt.chunk_elems, free // (4 * 16))


def _cos(a: torch.Tensor, b: torch.Tensor, b_norm: torch.Tensor) -> torch.Tensor:
    return (a * b).sum(-1) / (a.norm(dim=-1) * b_norm).clamp_min(1e-12)


def _raw_logits(head: Unembed, z: torch.Tensor) -> torch.Tensor:
    """``E · z`` in the head's matmul dtype, before the soft-cap (applied inside the fused function)."""
    return torch.nn.functional.linear(z.to(head.dtype), head.weight)


def _final_dist(raw: torch.Tensor, cap: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The model's own distribution of a chunk: ``p_L`` ``[rows, V]`` and ``sum p_L log p_L`` ``[rows]``."""
    logits = softcap(raw.float(), cap)
    lp = logits - torch.logsumexp(logits, -1, keepdim=True)
    p = lp.exp()
    return p, (p * lp).sum(-1)


def _chunk_stats(raw: torch.Tensor, idx: torch.Tensor, final, cap: float | None, need_dist: bool):
    """Every distribution metric of one ``[rows, V]`` chunk of raw logits, written for fusion.

    ``logits = softcap(raw)``; for the two targets ``idx`` ``[rows, 2]`` (input, next):
    ``tgt`` = their logits and ``greater`` = how many logits are strictly greater (rank - 1).
    With ``need_dist``: ``lse``, the entropy and (``final = (p_L, sum p_L log p_L)``) the KL from
    ``p_L``, all from the max-shifted logits ``s = logits - m`` (no fp32 cancellation of large
    terms): ``S = sum exp(s)``, ``H = log S - sum exp(s) s / S``, ``KL = sum p_L log p_L -
    sum p_L s + log S``. Compiled, this is two loops over the vocabulary (the max, then everything
    else) that never write a vocabulary-sized tensor; :func:`_chunk_stats_eager` is the same
    arithmetic op by op.
    """
    logits = softcap(raw.float(), cap)
    tgt = logits.gather(1, idx)  # [rows, 2]
    greater = torch.stack([(logits > tgt[:, :1]).sum(-1), (logits > tgt[:, 1:]).sum(-1)], 1)
    if not need_dist:
        return tgt, greater, None, None, None
    m = logits.amax(-1, keepdim=True)
    s = logits - m
    e = s.exp()
    S = e.sum(-1)
    logS = S.log()
    ent = logS - (e * s).sum(-1) / S
    kl = None
    if final is not None:
        p, neg_h = final
        kl = neg_h - (p * s).sum(-1) + logS
    return tgt, greater, m[:, 0] + logS, ent, kl


def _chunk_stats_eager(raw: torch.Tensor, idx: torch.Tensor, final, cap: float | None,
                       need_dist: bool):
    """:func:`_chunk_stats` for the eager path: the same numbers with fewer vocabulary-sized
    temporaries op by op (shifted in place, row-wise dot products by ``bmm``, one exponential
    pass). Overwrites ``raw``."""
    logits = softcap(raw.float(), cap)
    tgt = logits.gather(1, idx)
    greater = torch.stack([torch.count_nonzero(logits > tgt[:, j:j + 1], dim=-1) for j in range(2)], 1)
    if not need_dist:
        return tgt, greater, None, None, None
    m = logits.amax(-1, keepdim=True)
    s = logits.sub_(m)
    e = s.exp()
    S = e.sum(-1)
    logS = S.log()
    ent = logS - _rowdot(e, s) / S
    del e
    kl = None
    if final is not None:
        p, neg_h = final
        kl = neg_h - _rowdot(p, s) + logS
    return tgt, greater, m[:, 0] + logS, ent, kl


def _rowdot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Row-wise dot product ``[rows, V] x [rows, V] -> [rows]`` (bmm: one pass, no temporary)."""
    return torch.bmm(a.unsqueeze(1), b.unsqueeze(2))[:, 0, 0]


def _store(stats, metrics: set[str], out: dict[str, torch.Tensor], l: int, sl: slice) -> None:
    tgt, greater, lse, ent, kl = stats
    for j, which in enumerate(WHICH):
        rank = greater[:, j] + 1
        if "rank" in metrics:
            out[f"rank_{which}"][l, sl] = rank.float()
        if "logrank" in metrics:
            out[f"logrank_{which}"][l, sl] = torch.log10(rank.float())
        if "top1" in metrics:
            out[f"top1_{which}"][l, sl] = (rank == 1).float()
        if lse is None:
            continue
        lp = tgt[:, j] - lse
        if "logprob" in metrics:
            out[f"logprob_{which}"][l, sl] = lp
        if "prob" in metrics:
            out[f"prob_{which}"][l, sl] = lp.exp()
    if "entropy" in metrics:
        out["entropy"][l, sl] = ent
    if "kl_final" in metrics:
        out["kl_final"][l, sl] = kl


# --------------------------------------------------------------------------------------------
# Compiling the fused functions (torch.compile: inductor writes vectorised C++ on a CPU)
# --------------------------------------------------------------------------------------------

COMPILE = os.environ.get("RESIDSHIFT_LENS_COMPILE", "auto")
"""When the streamed pass compiles :func:`_chunk_stats` and :func:`_final_dist`: ``"auto"`` when a
pass unembeds at least :data:`COMPILE_MIN_WORK` logits (positions × layers × vocabulary; a
corpus pass counts all its windows), ``"always"``, or ``"never"`` (environment variable
``RESIDSHIFT_LENS_COMPILE``). Compiling costs seconds to tens of seconds once per process (less
with inductor's on-disk cache) and makes the elementwise work over the vocabulary several times
cheaper; the numbers differ from the eager ones only by float rounding (tested). Where compiling
fails (no C++ compiler) the pass warns once and stays eager."""
COMPILE_MIN_WORK = 10**9
_compiled: dict[str, Any] = {}
_compile_failed: list[str] = []


class _WorkHint:
    """The number of positions a whole corpus pass analyses (set by :func:`corpus_metrics`), so the
    compile decision sees the pass, not one batch of it."""

    def __init__(self):
        self.rows: int | None = None

    def get(self, n: int) -> int:
        return max(n, self.rows or 0)


_WORK_HINT = _WorkHint()


def _kernels(work: int):
    """``(_chunk_stats, _final_dist)``, compiled where :data:`COMPILE` asks for it and it works."""
    mode = COMPILE
    if mode not in ("auto", "always", "never"):
        raise LensError(f"RESIDSHIFT_LENS_COMPILE / lens.COMPILE must be 'auto', 'always' or 'never', "
                        f"got {mode!r}")
    use = mode == "always" or (mode == "auto" and work >= COMPILE_MIN_WORK)
    if not use or _compile_failed:
        return _chunk_stats_eager, _final_dist
    if not _compiled:
        _compiled["stats"] = _guarded(torch.compile(_chunk_stats, dynamic=True), _chunk_stats_eager)
        _compiled["final"] = _guarded(torch.compile(_final_dist, dynamic=True), _final_dist)
    return _compiled["stats"], _compiled["final"]


def _guarded(compiled, eager):
    """Call ``compiled``; if compiling fails, warn once and use ``eager`` from then on. A chunk of
    one row is padded to two (dynamic shapes specialise size 1, which would compile again)."""
    def call(raw, *args):
        if _compile_failed:
            return eager(raw, *args)
        one = raw.shape[0] == 1
        if one:
            raw = torch.cat([raw, raw])
            args = tuple(_pad_row(a) for a in args)
        try:
            res = compiled(raw, *args)
        except Exception as err:  # noqa: BLE001 - any compiler failure: stay correct, eager
            _compile_failed.append(f"{type(err).__name__}: {err}")
            warnings.warn(f"torch.compile of the lens metrics failed ({type(err).__name__}); using "
                          "the eager path (same numbers, slower). Set RESIDSHIFT_LENS_COMPILE=never "
                          "to skip the attempt.", RuntimeWarning, stacklevel=3)
            return eager(raw[:1] if one else raw, *(_first_row(a) if one else a for a in args))
        return _first_row(res) if one else res
    return call


def _pad_row(a):
    if isinstance(a, torch.Tensor):
        return torch.cat([a, a])
    if isinstance(a, tuple):
        return tuple(_pad_row(x) for x in a)
    return a


def _first_row(a):
    if isinstance(a, torch.Tensor):
        return a[:1]
    if isinstance(a, tuple):
        return tuple(_first_row(x) for x in a)
    return a


# --------------------------------------------------------------------------------------------
# Streaming over a corpus
# --------------------------------------------------------------------------------------------


@cache.storable
@dataclass
class LensResult:
    """What a corpus pass keeps (all CPU tensors; small, independent of the vocabulary size).

    - ``per_seq[column]``: ``[n_seq, L+1]`` mean over a sequence's analysed positions;
    - ``per_seq_median[column]``: ``[n_seq, L+1]`` median, for the rank columns;
    - ``tokens``: a per-token table: ``cur``, ``next``, ``seq``, ``pos`` (``[n_tok]``) and
      ``layers[column]`` (``[L+1, n_tok]``) for the columns in ``options.token_table``.
    """

    model: str
    n_layers: int
    columns: list[str]
    per_seq: dict[str, torch.Tensor]
    per_seq_median: dict[str, torch.Tensor]
    tokens: dict[str, Any]
    config: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def n_seq(self) -> int:
        return next(iter(self.per_seq.values())).shape[0]


def corpus_metrics(lm, info: ModelInfo, windows: torch.Tensor, *, batch: int = 8,
                   decoder: Decoder | None = None, attenuation=None,
                   options: LensOptions | None = None, remote: bool = False,
                   progress: Callable[[int, int], None] | None = None) -> LensResult:
    """Stream the lens over ``windows [n, T]`` in batches: one trace per batch, then metrics."""
    opt = options or LensOptions()
    windows = check_ids(windows, info)
    if batch < 1:
        raise LensError("batch must be at least 1")
    cols = metric_columns(opt.metrics)
    per_seq: dict[str, list] = {c: [] for c in cols}
    per_med: dict[str, list] = {c: [] for c in cols if c.startswith("rank_")}
    table: dict[str, list] = {c: [] for c in opt.token_table}
    t0 = time.perf_counter()
    n = windows.shape[0]
    previous, _WORK_HINT.rows = _WORK_HINT.rows, n * opt.position_index(windows.shape[1]).numel()
    try:
        parts = _corpus_batches(lm, info, windows, batch, decoder, attenuation, opt, remote, progress,
                                per_seq, per_med, table)
    finally:
        _WORK_HINT.rows = previous
    cur, nxt, seq, pos = parts
    tokens = {"cur": torch.cat(cur), "next": torch.cat(nxt), "seq": torch.cat(seq),
              "pos": torch.cat(pos), "layers": {c: torch.cat(v, 1) for c, v in table.items()}}
    return LensResult(
        model=info.name, n_layers=info.n_layers, columns=cols,
        per_seq={c: torch.cat(v) for c, v in per_seq.items()},
        per_seq_median={c: torch.cat(v) for c, v in per_med.items()},
        tokens=tokens, seconds=time.perf_counter() - t0,
    )


def _corpus_batches(lm, info, windows, batch, decoder, attenuation, opt, remote, progress,
                    per_seq, per_med, table):
    """The batch loop of :func:`corpus_metrics` (fills ``per_seq``, ``per_med``, ``table``)."""
    cols = list(per_seq)
    cur, nxt, seq, pos = [], [], [], []
    n = windows.shape[0]
    remote = info.remote or remote
    if remote:
        _local_parts_refused(decoder, attenuation)
        from .remote_lens import traced_metrics
    for start in range(0, n, batch):
        ids = windows[start:start + batch]
        if remote:  # decoded inside the trace (measure.remote_lens): only the metrics come back
            m = traced_metrics(lm, info, ids, options=opt, remote=remote)
        else:
            hs = collect_residuals(lm, info, ids, attenuation=attenuation)
            m = residual_metrics(info, hs, ids, decoder=decoder, options=opt)
            del hs
        for c in cols:
            per_seq[c].append(m[c].mean(-1).T)  # [B, L+1]
        for c in per_med:
            per_med[c].append(m[c].median(-1).values.T)
        where = opt.position_index(ids.shape[1])
        b, tt = ids.shape[0], where.numel()
        for c in table:
            table[c].append(m[c].reshape(m[c].shape[0], -1).to(torch.float32))
        cur.append(ids[:, where].reshape(-1).to(torch.int32))
        nxt.append(ids[:, where + 1].reshape(-1).to(torch.int32))
        seq.append(torch.arange(start, start + b, dtype=torch.int32).repeat_interleave(tt))
        pos.append(where.to(torch.int16).repeat(b))
        if progress:
            progress(min(n, start + batch), n)
    return cur, nxt, seq, pos


def _local_parts_refused(decoder, attenuation) -> None:
    """A pass decoded inside a remote trace takes no local decoder and no edit (one line, the fix)."""
    if decoder is not None or attenuation:
        raise LensError("a remote pass decodes inside the trace through the model's own norm and matrix: it takes "
                        "no fitted decoder and no attenuation; run those on a local model")


@dataclass(frozen=True)
class LensPass:
    """The windows one cached lens pass reads and how it runs: :func:`run_lens`'s settings as one
    object. A notebook builds it once from its profile (``residshift.study.lens_setups``), and every
    pass over those windows (unmodified, attenuated, gated, through a fitted decoder) takes it.

    >>> p = LensPass("wikitext-2", "test", window=128, n=64, metrics=("top1",))
    >>> res = p.run(loaded)                          # run_lens(lm, info, tok, corpus=..., n=64, ...)
    >>> res = p.run(loaded, attenuation={4: 0.0})   # any other run_lens argument on top
    """

    corpus: str
    split: str
    window: int
    n: int = field(metadata=profiles.key("windows"))  # profiles.stage(LensPass, P, "lens"): lens_windows
    seed: int = 0
    batch: int = 8
    metrics: tuple[str, ...] | None = None
    matmul_dtype: str = field(default="float32", metadata=profiles.key("matmul"))
    positions: int | None = None

    def settings(self) -> dict[str, Any]:
        """The keyword arguments of :func:`run_lens` this pass fixes."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def with_(self, **changes: Any) -> "LensPass":
        return replace(self, **changes)

    def run(self, loaded, **kw: Any) -> "LensResult":
        """:func:`run_lens` on ``loaded = (model, tokenizer, info)`` with these settings (``kw`` on top)."""
        lm, tok, info = loaded
        return run_lens(lm, info, tok, **{**self.settings(), **kw})


def run_lens(lm, info: ModelInfo, tokenizer, *, corpus: str, split: str, window: int, n: int,
             seed: int = 0, batch: int = 8, metrics: Iterable[str] | None = None,
             decoder: Decoder | None = None, decoder_id: str | None = None,
             attenuation: Mapping[int, float] | None = None, matmul_dtype: str = "float32",
             positions: int | None = None, bos: bool | None = None, detokenize: bool = True,
             remote: bool = False, refresh: bool = False, verbose: bool = False,
             progress: Callable[[int, int], None] | None = None) -> LensResult:
    """The cached corpus-level pass: windows of a named corpus through :func:`corpus_metrics`.

    Cached under ``results/lens-metrics`` by (model, its weights' fingerprint, the matrix an untied
    model is read through, corpus, split, window, n, seed, metrics, decoder id, attenuation, matmul
    dtype, positions, BOS, detokenization) and the code. A decoder
    needs a ``decoder_id`` that names it (e.g. the tuned lens's cache key), so a cached result is
    never reused for another decoder. ``bos``: start every window with BOS (None = as the model was
    trained, ``info.prepend_bos``); ``detokenize``: undo WikiText's word tokenization (our rules,
    ``data.detokenize_wikitext``) or feed the raw v1 text. Both choices are defensible; notebook 03
    shows how much the curves move with each.
    """
    if decoder is not None and not decoder_id:
        raise LensError("a decoder needs decoder_id= (a string naming it) so results can be cached")
    opt = LensOptions(metrics=check_metrics(metrics), matmul_dtype=matmul_dtype, positions=positions,
                      seed=seed)
    plan = attenuation_plan(info, dict(attenuation)) if attenuation else {}
    config = {
        "model": info.name, "source": info.source, "corpus": corpus, "split": split,
        "window": int(window), "n": int(n), "seed": int(seed), "metrics": list(opt.metrics),
        "decoder": decoder_id if decoder is not None else None,
        "attenuation": {str(k): float(v) for k, v in plan.items()},
        "matmul_dtype": matmul_dtype, "token_table": list(opt.token_table),
        "positions": positions, "bos": info.prepend_bos if bos is None else bool(bos),
        "detokenize": bool(detokenize),
        "weights": None if info.remote is True else model_fingerprint(lm),  # NDIF's weights are not here
    }
    if info.decoder != "tied":  # an untied model read through a chosen matrix (core.models.DECODERS)
        config["head"] = info.decoder

    def compute() -> LensResult:
        windows = token_windows(corpus, split, tokenizer, length=window, n=n, seed=seed,
                                prepend_bos=config["bos"], detokenize=detokenize)
        prog = progress  # called with (windows done, windows in all) after every batch
        if verbose and prog is None:
            def prog(done, total):
                print(f"  {info.name}: {done}/{total} windows", flush=True)
        res = corpus_metrics(lm, info, windows, batch=batch, decoder=decoder,
                             attenuation=plan or None, options=opt, remote=remote, progress=prog)
        res.config = config
        return res

    return cache.cached("lens-metrics", config, compute, code=(run_lens, decoder), refresh=refresh)


# --------------------------------------------------------------------------------------------
# Token types (for breakdowns)
# --------------------------------------------------------------------------------------------

TOKEN_KINDS = ("whitespace", "punctuation", "number", "word")


def token_kind(text: str) -> str:
    """Our token classes: whitespace (only spaces/newlines), punctuation (no letter or digit),
    number (digits, no letters), word (has a letter)."""
    stripped = text.strip()
    if not stripped:
        return "whitespace"
    if any(ch.isalpha() for ch in stripped):
        return "word"
    if any(ch.isdigit() for ch in stripped):
        return "number"
    if all(unicodedata.category(ch)[0] in "PSZC" for ch in stripped):
        return "punctuation"
    return "word"


def token_kinds(tokenizer, ids: Iterable[int]) -> dict[int, str]:
    """``{id: kind}`` for the distinct ids given."""
    uniq = sorted(set(int(i) for i in ids))
    texts = tokenizer.convert_ids_to_tokens(uniq)
    out = {}
    for i, raw in zip(uniq, texts):
        out[i] = token_kind(tokenizer.convert_tokens_to_string([raw]) if raw is not None else "")
    return out


def frequency_bins(counts: np.ndarray, ids: np.ndarray,
                   edges: tuple[int, ...] = (100, 1000, 10000)) -> tuple[np.ndarray, list[str]]:
    """Bin tokens by the frequency rank of their id in a corpus (``counts[id]``).

    Rank 1 = the most frequent id. With edges (100, 1000, 10000) the bins are
    ``top-100``, ``100-1k``, ``1k-10k``, ``>10k`` (ranks). Returns (bin index per id, labels).
    """
    counts = np.asarray(counts)
    order = np.argsort(-counts, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(1, len(order) + 1)
    r = rank[np.asarray(ids)]
    labels = []
    prev = 0
    for e in edges:
        labels.append(f"rank {_k(prev + 1)}-{_k(e)}")
        prev = e
    labels.append(f"rank >{_k(edges[-1])}")
    return np.searchsorted(np.asarray(edges), r, side="left"), labels


def _k(x: int) -> str:
    return f"{x // 1000}k" if x >= 1000 and x % 1000 == 0 else str(x)


def corpus_token_counts(tokenizer, info: ModelInfo, corpus: str, split: str, *,
                        detokenize: bool = True) -> np.ndarray:
    """Token-id counts of a whole corpus split under the model's tokenizer (length = vocab).

    ``detokenize`` as in :func:`run_lens`: count the text the lens pass saw (raw or detokenized
    WikiText), so a unigram baseline matches its windows.
    """
    tokens = tokenize_text(corpus_text(corpus, split, detokenize=detokenize), tokenizer)
    return np.bincount(tokens, minlength=info.vocab_size)


def input_persistence(result: "LensResult", first: int, *,
                      metrics: Iterable[str] = ("logprob", "logrank")) -> dict[str, torch.Tensor]:
    """How much of the input token the stream still carries from residual ``h_first`` on.

    Per window (the bootstrap unit): the mean over ``h_first .. h_L`` of the input token's lens
    alignment, one entry per metric (``logprob_input``: higher = more input; ``logrank_input``:
    lower = more input). Compare a model before and after attenuating block ``b`` with
    ``first = b + 1`` (the residuals after the edited block), window by window: a direct measure
    of the misalignment the paper describes, unlike a gap that also moves with the loss.
    """
    if not 0 <= first <= result.n_layers:
        raise LensError(f"first must lie in 0..{result.n_layers}, got {first}")
    out = {}
    for m in metrics:
        col = f"{m}_input"
        if col not in result.per_seq:
            raise LensError(f"the lens result has no {col!r}; run it with metrics including {m!r}")
        out[m] = result.per_seq[col][:, first:].double().mean(1)
    return out


def unigram_baseline(result: "LensResult", counts: np.ndarray) -> dict[str, torch.Tensor]:
    """What a decoder that ignores the residual stream achieves on the same analysed positions.

    The unigram decoder always answers with the corpus's token distribution ``q`` (``counts``, from
    :func:`corpus_token_counts`): its top-1 guess is the most frequent token. Per window (the
    bootstrap unit), for ``x`` = the input and the next token: ``top1_<x>`` = share of positions
    where ``x`` is that most frequent token, and ``logprob_<x>`` = mean ``log q(x)`` (add-one
    smoothed). A lens layer is "interpretable" for ``x`` only where it beats these (notebook 03's
    C1 rule); SmolLM2's middle layers, for instance, decode "." and "and": a frequency guess.
    """
    counts = np.asarray(counts, dtype=np.float64)
    q = (counts + 1) / (counts + 1).sum()
    top = int(np.argmax(counts))
    seq = result.tokens["seq"].long()
    n = result.n_seq
    out = {}
    for which, ids in (("input", result.tokens["cur"].long()), ("next", result.tokens["next"].long())):
        per_tok = {"top1": (ids == top).double(), "logprob": torch.from_numpy(np.log(q))[ids]}
        for name, v in per_tok.items():
            sums = torch.zeros(n, dtype=torch.float64).index_add_(0, seq, v)
            cnt = torch.zeros(n, dtype=torch.float64).index_add_(0, seq, torch.ones_like(v))
            out[f"{name}_{which}"] = sums / cnt
    out["top_token"] = top
    return out


# --------------------------------------------------------------------------------------------
# The three regimes of a decoded trajectory
# --------------------------------------------------------------------------------------------

REGIMES = ("other", "input", "next")


def classify_decoded(top1: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Label each decoded top-1 token: 1 = the input token ``x_t``, 2 = the next token ``x_{t+1}``,
    0 = other (:data:`REGIMES`).

    ``top1 [L+1, T]`` and ``ids [T]`` of one sequence. Where ``x_t == x_{t+1}`` a match counts as
    "input" (the earlier regime). The last position has no next token, so it is never "next".
    """
    top1, ids = torch.as_tensor(top1), torch.as_tensor(ids)
    if top1.ndim != 2 or ids.ndim != 1 or top1.shape[1] != ids.shape[0]:
        raise LensError(f"expected top1 [L+1, T] and ids [T], got {tuple(top1.shape)} and {tuple(ids.shape)}")
    nxt = torch.cat([ids[1:], torch.tensor([-1])])
    out = torch.zeros_like(top1)
    out[top1 == nxt] = 2
    out[top1 == ids] = 1
    return out
