"""The logit lens decoded inside the trace, so that a remote (NDIF) model sends back only metrics.

:mod:`residshift.measure.lens` saves the residual stream ``h_0..h_L`` and decodes it here, through
``info.final_norm`` and ``info.embedding``. A remote model holds those on the meta device, so this
module moves the decoding into the trace, as nnsight's own idiom does
(``model.lm_head(model.model.norm(h)).save()``): per layer, the final norm and the matrix ``E`` are
applied where the model runs, the distribution metrics are computed there with the same arithmetic
as the local lens (:func:`residshift.measure.lens._chunk_stats_eager`), and what comes back is
``[L+1, positions]`` numbers, not ``[L+1, positions, d]`` residuals or ``[positions, vocab]`` logits.

- :func:`traced_metrics`: the distribution metrics of :func:`residshift.measure.lens.residual_metrics`
  (rank, log rank, log-prob, prob, top-1, entropy, KL from the final layer), ``{column: [L+1, B, P]}``;
- :func:`traced_top`: :func:`residshift.measure.lens.decode_top`'s top-``k`` tokens per layer.

Both run with ``remote=True`` (NDIF), with nnsight's ``remote="local"`` (the request serialized and
run here with our own modules hidden, as a server would: the offline test of this path), or locally.
The cosine metrics read rows of ``E`` beside the residual and are not computed here (:data:`METRICS`).
The whole ``[positions, vocab]`` logits of one layer exist at once on the model's device (no
chunking: a server has the memory; run a shorter ``batch`` if it has not).
"""
from __future__ import annotations

import torch

from ..core.forward import check_ids
from ..core.models import ModelInfo
from ..core.models.interface import resolve
from ..core.unembed import softcap
from .lens import (_LOGIT_METRICS, METRICS as LENS_METRICS, LensError, LensOptions, _chunk_stats_eager, _final_dist,
                   _store, metric_columns)

METRICS = tuple(m for m in LENS_METRICS if m in _LOGIT_METRICS)  # what a pass decoded inside the trace computes


def _register() -> None:
    """Ship residshift's own functions by value with a remote request (a server does not have the
    package installed): the in-trace arithmetic below calls :func:`_chunk_stats_eager`."""
    import nnsight

    nnsight.register("residshift")


def matrix_module(lm, info: ModelInfo):
    """The envoy whose ``weight`` is the matrix the lens reads through: the input embedding for a tied
    model or ``decoder="input"``, the output head for ``decoder="output"``."""
    if info.decoder != "output":
        return resolve(lm, info.embed_path)
    head = lm._module.get_output_embeddings()
    path = next((name for name, m in lm._module.named_modules() if m is head), None)
    if path is None:
        raise LensError(f"{info.name}: the output head is not a named module; read it with --decoder input")
    return resolve(lm, path)


def _decoding(lm, info: ModelInfo, remote):
    """The final norm's and the matrix's envoys, and the trace's ``remote`` (default ``info.remote``;
    when set, residshift's functions are shipped by value)."""
    remote = info.remote if remote is None else remote
    if remote:
        _register()
    return resolve(lm, info.norm_path), matrix_module(lm, info), remote


def _residuals(lm, info: ModelInfo) -> list:
    """``h_0..h_L`` inside a trace, read in execution order (layer 0's input, then every output)."""
    hs = []
    for l, layer in enumerate(info.layer_envoys(lm)):
        if l == 0:
            hs.append(layer.input)
        hs.append(layer.output)
    return hs


def traced_metrics(lm, info: ModelInfo, ids, *, options: LensOptions | None = None,
                   remote: bool | str | None = None) -> dict[str, torch.Tensor]:
    """:func:`residshift.measure.lens.residual_metrics`'s distribution columns ``{column: [L+1, B, P]}``
    of ``ids [B, T]``, decoded inside one trace (``remote``: ``lm.trace``'s, default ``info.remote``)."""
    opt = options or LensOptions(metrics=METRICS)
    local_only = [m for m in opt.metrics if m not in METRICS]
    if local_only:
        raise LensError(f"the metric(s) {', '.join(local_only)} read rows of E beside the residual and are "
                        f"computed locally only; a pass decoded inside the trace computes {', '.join(METRICS)}: "
                        "pass metrics= some of those")
    ids = check_ids(ids, info)
    B, T = ids.shape
    where = opt.position_index(T)
    idx = torch.stack([ids[:, where], ids[:, where + 1]], -1).reshape(-1, 2)
    need_dist = bool(set(opt.metrics) & {"logprob", "prob", "entropy", "kl_final"})
    need_final = "kl_final" in opt.metrics
    norm, matrix, remote = _decoding(lm, info, remote)
    cap, V = info.logit_softcap, info.vocab_size
    with torch.no_grad(), lm.trace(ids, remote=remote):
        hs = _residuals(lm, info)
        E = matrix.weight.float()
        at = idx.to(E.device)
        final = raw_last = None
        if need_final:  # the model's own distribution: h_L through the same matrix (its logits reused below)
            raw_last = torch.nn.functional.linear(norm(hs[-1][:, where]).float(), E).reshape(-1, V)
            final = _final_dist(raw_last, cap)
        parts = []
        for l, h in enumerate(hs):
            last = l == len(hs) - 1 and raw_last is not None
            raw = raw_last if last else torch.nn.functional.linear(norm(h[:, where]).float(), E).reshape(-1, V)
            tgt, greater, lse, ent, kl = _chunk_stats_eager(raw, at, final, cap, need_dist)
            row = [tgt, greater.float()]
            if need_dist:
                row += [lse[:, None], ent[:, None]] + ([kl[:, None]] if need_final else [])
            parts.append(torch.cat(row, -1).cpu())
        packed = torch.stack(parts).save()  # [L+1, n, 4 (+3)]: the only tensor that travels
    return unpack(packed, opt, B, where.numel())


def unpack(packed: torch.Tensor, opt: LensOptions, B: int, P: int) -> dict[str, torch.Tensor]:
    """The columns of ``packed [L+1, n, k]`` (target logits, counts above them, then log-sum-exp,
    entropy and KL where asked), through the local lens's own :func:`_store`."""
    L1, n, k = packed.shape
    out = {c: torch.empty(L1, n) for c in metric_columns(opt.metrics)}
    for l in range(L1):
        p = packed[l]
        dist = (p[:, 4], p[:, 5], p[:, 6] if k > 6 else None) if k > 4 else (None, None, None)
        _store((p[:, :2], p[:, 2:4].long(), *dist), set(opt.metrics), out, l, slice(0, n))
    return {c: v.reshape(L1, B, P) for c, v in out.items()}


def traced_top(lm, info: ModelInfo, ids, *, k: int = 1, remote: bool | str | None = None) -> dict[str, torch.Tensor]:
    """:func:`residshift.measure.lens.decode_top` decoded inside one trace: ``{"ids", "probs"}``
    ``[L+1, B, T, k]`` and ``"model_logits"`` ``[B, T, V]`` (a short batch: the worked examples)."""
    ids = check_ids(ids, info, min_len=1)
    if not 1 <= k <= info.vocab_size:
        raise LensError(f"k={k} must lie in 1..{info.vocab_size} (the vocabulary)")
    norm, matrix, remote = _decoding(lm, info, remote)
    cap = info.logit_softcap
    with torch.no_grad(), lm.trace(ids, remote=remote):
        hs = _residuals(lm, info)
        E = matrix.weight.float()
        top_i, top_p = [], []
        for h in hs:
            logits = softcap(torch.nn.functional.linear(norm(h).float(), E), cap)
            v, i = logits.topk(k, dim=-1)
            top_i.append(i.cpu())
            top_p.append(torch.exp(v - torch.logsumexp(logits, -1, keepdim=True)).cpu())
        ids_ = torch.stack(top_i).save()  # [L+1, B, T, k]
        probs = torch.stack(top_p).save()
        logits = lm.output.logits.float().cpu().save()
    return {"ids": ids_, "probs": probs, "model_logits": logits}
