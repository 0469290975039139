"""The evaluation harness: scores any causal LM that ``load_model`` returns.

Every score comes with a standard error, every task can be subsampled (``limit``: the first n items
after a seeded shuffle), every result is cached by configuration (resumable shard by shard), and
every scoring function accepts ``intervene(model, info)``, run inside the nnsight trace, so an
intervened model (``lambda m, i: attenuate(m, i, {20: 0.5})``, fitted gates, ...) is scored by the
same code as the bare one.

Tasks and our definitions (prompt formats follow lm-evaluation-harness, "lm-eval"):

``wikitext-2-validation``, ``wikitext-2-test``, ``wikitext-103-validation``, ``wikitext-103-test``
    The whole split as one detokenized text (``data.corpus_text``; articles joined by newlines),
    tokenized once and scored with a sliding window of ``context`` tokens moved by ``stride``:
    every token is scored exactly once, with at least ``context - stride`` tokens of context
    except in the first window (HF "strided perplexity"; lm-eval instead scores each article with
    disjoint windows). Models with ``prepend_bos`` get BOS at the start of EVERY window (it counts
    in ``context``); without BOS the first token of the split is not scored. Reported:
    ``loss`` (mean NLL per token, nats), ``ppl`` = exp(loss), ``word_loss`` = loss × tokens / words
    and ``word_ppl`` = exp(word_loss) where words are whitespace-separated words of the detokenized
    text (= total NLL / words when every window is scored; tokenizer-independent), and
    ``bits_per_byte`` = loss × tokens / UTF-8 bytes / ln 2. The SE treats the windows as units
    (ratio estimator: sum NLL / sum tokens); per-word and per-byte SEs scale it by the same
    constant. Note: WikiText-2 and WikiText-103 share their validation and test articles; only the
    ``<unk>`` replacement differs (WikiText-2's smaller vocabulary has ~6x more ``<unk>``).

lm-eval's ``wikitext`` definition (:func:`document_perplexity`, :func:`wikitext_document_perplexity`)
    Each article (:func:`wikitext_documents`, cut as ``EleutherAI/wikitext_document_level``; 62 in
    WikiText-2 test) detokenized by lm-eval's rules and scored alone in disjoint windows of
    ``max_length`` tokens (BOS/EOS prefix for the first); ``word_perplexity`` = exp(sum NLL / sum
    words) with lm-eval's word count of the page before detokenization, ``byte_perplexity`` and
    ``bits_per_byte`` likewise; it moves with ``max_length``. Checked against lm-eval's own task
    by ``benchmarks/validate_wikitext_ppl.py``.

``lambada``
    LAMBADA (OpenAI version). As lm-eval's ``lambada_openai``: the target is the last
    SPACE-separated word (``text.split(" ")[-1]``, so in 7 of 5153 passages it keeps a newline
    prefix), the continuation is ``" " + target`` (leading space included), the context the rest.
    ``acc``: greedy match (every token of the continuation is the argmax); ``ppl`` = exp(mean NLL of
    the continuation), i.e. per target word as in lm-eval; ``loss`` = that mean NLL (nats per word).

``piqa`` (validation), ``arc-easy``, ``arc-challenge`` (test)
    Zero-shot multiple choice by log-likelihood. Context ``"Question: {goal}\\nAnswer:"`` (PIQA)
    and ``"Question: {question}\\nAnswer:"`` (ARC; the local file's query already starts with
    ``"Question: "``); continuation ``" " + choice``. ``acc``: argmax of the summed log-likelihood;
    ``acc_norm``: argmax of log-likelihood / number of CHARACTERS of the choice text (without the
    leading space), exactly lm-eval's ``completion_len = len(choice)``. The choices of a question
    share their context, which runs once (a KV cache expanded across the choices; scores equal to
    whole sequences up to float rounding, see :func:`score_requests`).

Tokenization of a (context, continuation) pair is lm-eval's: trailing spaces of the context move to
the continuation, the pair is tokenized whole, and the continuation is the tokens past the
context's own tokens; BOS is prepended per ``info.prepend_bos``. Accuracy SEs are
sqrt(p (1 - p) / (n - 1)) (the sample SE of 0/1 scores, lm-eval's ``mean_stderr``); loss SEs are
sample SE over items (or windows), and perplexity SEs follow by the delta method (ppl × SE(loss)).
"""
from __future__ import annotations

import hashlib
import inspect
import json
import math
import re
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, ClassVar, Iterable, Sequence

import numpy as np
import pandas as pd
import torch

from ..analysis.stats import binomial_se, mean_se, ratio_se
from ..core import cache as _cache, profiles
from ..core.models import ModelInfo, model_fingerprint
from ..core.data import corpus_text, load_corpus, tokenize_text, tokenizer_fingerprint
from ..core.forward import Intervene, refuse_remote
from ..core.progress import progress as progress_bar

# why a remote (NDIF) model is refused (core.forward.refuse_remote)
_LOCAL_MODULE = ("calls the local module and hashes its weights for the cache key, and a remote model holds them "
                 "on the meta device")


def perplexity(losses: torch.Tensor) -> dict[str, float]:
    """Mean loss, perplexity and their standard errors (windows as the independent units)."""
    per_window = losses.mean(dim=1).double()
    n = len(per_window)
    mean = float(per_window.mean())
    se = float(per_window.std(unbiased=True) / math.sqrt(n)) if n > 1 else float("nan")
    return {"loss": mean, "loss_se": se, "ppl": math.exp(mean), "ppl_se": math.exp(mean) * se,
            "windows": n, "tokens": int(losses.numel())}


def multiple_choice_metrics(loglikelihoods: Sequence[float], choices: Sequence[str],
                            gold: int) -> dict[str, Any]:
    """lm-eval's rule for one question: ``acc`` by raw log-likelihood, ``acc_norm`` by
    log-likelihood per character of the choice text (``len(choice)``, no leading space)."""
    ll = np.asarray(loglikelihoods, dtype=np.float64)
    if len(ll) != len(choices) or len(ll) < 2:
        raise ValueError(f"need one log-likelihood per choice (>= 2), got {len(ll)} for {len(choices)}")
    lengths = np.asarray([float(len(c)) for c in choices])
    if (lengths == 0).any():
        raise ValueError("a choice is empty; acc_norm divides by its length")
    if not 0 <= gold < len(choices):
        raise ValueError(f"gold index {gold} out of range for {len(choices)} choices")
    pred, pred_norm = int(np.argmax(ll)), int(np.argmax(ll / lengths))
    return {"pred": pred, "pred_norm": pred_norm, "acc": float(pred == gold),
            "acc_norm": float(pred_norm == gold)}


# --------------------------------------------------------------------------------------------
# Tokenization of (context, continuation) pairs
# --------------------------------------------------------------------------------------------


def encode(tokenizer, text: str) -> list[int]:
    """Token ids of ``text`` without special tokens."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def encode_pair(tokenizer, context: str, continuation: str, *,
                bos_id: int | None = None) -> tuple[list[int], list[int]]:
    """lm-eval's split: trailing spaces of the context move to the continuation; the pair is
    tokenized whole and the continuation is what follows the context's own tokens."""
    if not continuation.strip():
        raise ValueError(f"the continuation {continuation!r} is empty: nothing to score")
    n_spaces = len(context) - len(context.rstrip())
    if n_spaces:
        continuation = context[-n_spaces:] + continuation
        context = context[:-n_spaces]
    whole = encode(tokenizer, context + continuation)
    ctx = encode(tokenizer, context) if context else []
    cont = whole[len(ctx):]
    if not cont:
        raise ValueError(f"the continuation {continuation!r} produced no tokens after the context")
    if bos_id is not None:
        ctx = [int(bos_id)] + ctx
    if not ctx:
        raise ValueError("empty context and no BOS: the first continuation token has no predictor; "
                         "give a context or load the model with prepend_bos=True")
    return ctx, cont


# --------------------------------------------------------------------------------------------
# The one scoring core: sum log p(tokens[n_ctx:] | tokens[:n_ctx]) for many requests
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    """Score ``tokens[n_ctx:]`` given ``tokens[:n_ctx]`` (n_ctx >= 1)."""

    tokens: tuple[int, ...]
    n_ctx: int

    def __post_init__(self):
        if not 1 <= self.n_ctx < len(self.tokens):
            raise ValueError(f"a request needs 1 <= n_ctx < len(tokens), got n_ctx={self.n_ctx} for "
                             f"{len(self.tokens)} tokens")


def _max_positions(module) -> int | None:
    cfg = getattr(module, "config", None)
    for attr in ("max_position_embeddings", "n_positions"):
        value = getattr(cfg, attr, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def _supports_keep(module) -> bool:
    try:
        return "logits_to_keep" in inspect.signature(module.forward).parameters
    except (TypeError, ValueError):
        return False


def make_batches(lengths: Sequence[int], *, batch_size: int, max_tokens: int,
                 scored: Sequence[int] | None = None, max_scored: int | None = None) -> list[list[int]]:
    """Indices grouped into batches, longest first, of at most ``batch_size`` rows, at most
    ``max_tokens`` padded tokens and at most ``max_scored`` scored positions (each one costs a
    vocabulary-sized row of logits); a single row over a limit still gets its own batch."""
    if batch_size < 1 or max_tokens < 1 or (max_scored is not None and max_scored < 1):
        raise ValueError(f"batch_size, max_tokens and max_scored must be >= 1, got {batch_size}, "
                         f"{max_tokens}, {max_scored}")
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    current: list[int] = []
    n_scored = 0
    for i in order:
        width = lengths[current[0]] if current else lengths[i]
        extra = scored[i] if scored is not None else 0
        over_scored = max_scored is not None and n_scored + extra > max_scored
        if current and (len(current) >= batch_size or (len(current) + 1) * width > max_tokens
                        or over_scored):
            batches.append(current)
            current = []
            n_scored = 0
        current.append(i)
        n_scored += extra
    if current:
        batches.append(current)
    return batches


def _cache_arg(module) -> str | None:
    """The forward argument that takes (and the output field that returns) a KV cache — ``cache``
    in transformers 5, ``past_key_values`` before — or None for a model without one (our GPT),
    which is then scored without prefix reuse. Position ids and ``use_cache`` are required too."""
    try:
        params = inspect.signature(module.forward).parameters
    except (TypeError, ValueError):
        return None
    if not {"position_ids", "use_cache"} <= set(params):
        return None
    return next((name for name in ("cache", "past_key_values") if name in params), None)


def _forward(model, info: ModelInfo, ids: torch.Tensor, kwargs: dict[str, Any],
             intervene: Intervene | None, bf16: bool, want_cache: str | None = None):
    """One forward of ``ids`` with ``kwargs``: the bare module, or an nnsight trace running
    ``intervene`` first. ``want_cache``: the output field of the KV cache to return too
    (:func:`_cache_arg`). Returns ``(logits, cache or None)``."""
    module = model._module
    device = info.embedding.device
    ids = ids.to(device)
    kwargs = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in kwargs.items()}
    if want_cache:
        kwargs["use_cache"] = True
    pkv = None
    with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
        if intervene is None:
            out = module(input_ids=ids, **kwargs)
            logits = out.logits
            if want_cache:
                pkv = getattr(out, want_cache, None)
        else:
            with model.trace(ids, remote=info.remote, **kwargs):
                intervene(model, info)
                logits = model.output.logits.save()
                if want_cache:
                    pkv = getattr(model.output, want_cache).save()
    return logits, pkv


def _kept_logits(model, info: ModelInfo, ids: torch.Tensor, mask: torch.Tensor, keep: torch.Tensor,
                 intervene: Intervene | None, bf16: bool = False, **extra) -> torch.Tensor:
    """Logits ``[k, vocab]`` (float32) at the positions where ``keep`` ``[b, s]`` is True,
    row-major. Uses ``logits_to_keep`` where the model supports it (the vocabulary projection is
    most of the cost for Gemma-3's 262k vocabulary). ``bf16``: run under bfloat16 autocast.
    ``extra``: more forward arguments (the prefix path's cache and positions)."""
    use_keep = _supports_keep(model._module)
    kwargs: dict[str, Any] = {"attention_mask": mask, **extra}
    if use_keep:
        kwargs["logits_to_keep"] = keep.to(info.embedding.device)
    logits, _ = _forward(model, info, ids, kwargs, intervene, bf16)
    logits = logits.float()
    if not use_keep or logits.ndim == 3:
        logits = logits[keep.to(logits.device)]
    return logits


def score_requests(model, info: ModelInfo, requests: Sequence[Request], *, batch_size: int = 16,
                   max_batch_tokens: int = 8192, max_logits: int = 2**27, pad_id: int = 0,
                   intervene: Intervene | None = None, progress: bool = False,
                   desc: str = "score", bf16: bool = False, prefix_reuse: bool | str = "auto"
                   ) -> dict[str, np.ndarray]:
    """Sum of log-probabilities, token count and greedy match of each request's scored tokens.

    Rows are right-padded (causal attention: padding after a row's tokens cannot change them;
    the attention mask is passed anyway) and grouped by length; a batch keeps at most
    ``max_logits`` logits (scored positions × vocabulary, float32) in memory. Requests longer than the model's
    maximum positions are left-truncated (lm-eval's rule). Returns ``logprob`` (float64),
    ``tokens`` (int) and ``greedy`` (bool: every scored token was the argmax).

    ``prefix_reuse``: requests that share their context (the choices of a multiple-choice
    question) run it once: one forward of the context with a KV cache, the cache expanded across
    the requests, one forward of their continuations (:func:`_score_shared`). ``"auto"`` (the
    default) does so per question only where it saves tokens (:func:`reuse_saves`: the context
    tokens saved exceed the choices' own tokens; ARC's long questions and short answers, not PIQA's
    short goals and long solutions), ``True`` for every shared context, ``False`` never. The
    scores are the same up to float rounding (tested); ``intervene`` runs inside both traces, which is the same
    edit as on the whole sequence for any edit that acts on each position on its own, as
    :func:`residshift.core.interventions.attenuate` and the gates do (pass ``prefix_reuse=False``
    for an edit that looks across positions).
    """
    refuse_remote(info, "evaluate.score_requests", _LOCAL_MODULE)
    if prefix_reuse not in PREFIX_REUSE:
        raise ValueError(f"prefix_reuse must be one of {PREFIX_REUSE}, got {prefix_reuse!r}")
    max_len = _max_positions(model._module)
    rows: list[tuple[list[int], int]] = []  # (input ids, number of scored positions)
    truncated: set[int] = set()
    for i, r in enumerate(requests):
        toks = list(r.tokens)
        n_cont = len(toks) - r.n_ctx
        if max_len is not None and len(toks) - 1 > max_len:
            toks = toks[-(max_len + 1):]
            truncated.add(i)
            if n_cont >= len(toks):
                raise ValueError(f"a continuation of {n_cont} tokens exceeds the model's {max_len} positions")
        rows.append((toks, n_cont))
    n = len(rows)
    logprob = np.zeros(n, dtype=np.float64)
    count = np.zeros(n, dtype=np.int64)
    greedy = np.zeros(n, dtype=bool)
    max_scored = max(1, max_logits // info.vocab_size)
    plain = list(range(n))
    groups: list[list[int]] = []
    if prefix_reuse and not info.remote and _cache_arg(model._module) is not None:
        groups, plain = _shared_groups(requests, truncated, saving_only=prefix_reuse == "auto")

    def plain_batches(idx: list[int]) -> list[list[int]]:
        return [[idx[j] for j in b] for b in
                make_batches([len(rows[i][0]) - 1 for i in idx], batch_size=batch_size,
                             max_tokens=max_batch_tokens, scored=[rows[i][1] for i in idx],
                             max_scored=max_scored)]

    shared = _group_batches(requests, groups, batch_size=batch_size, max_tokens=max_batch_tokens,
                            max_scored=max_scored)
    it: Iterable = [("plain", b) for b in plain_batches(plain)] + [("shared", b) for b in shared]
    if progress:
        it = progress_bar(it, desc=f"{info.name} {desc}", unit="batch")
    out = (logprob, count, greedy)
    for kind, batch in it:
        if kind == "plain":
            _score_plain(model, info, rows, batch, pad_id=pad_id, intervene=intervene, bf16=bf16, out=out)
        elif not _score_shared(model, info, requests, batch, pad_id=pad_id, intervene=intervene,
                               bf16=bf16, out=out):  # a cache this code cannot expand: score plainly
            for b in plain_batches([i for g in batch for i in g]):
                _score_plain(model, info, rows, b, pad_id=pad_id, intervene=intervene, bf16=bf16, out=out)
    return {"logprob": logprob, "tokens": count, "greedy": greedy}


def _score_plain(model, info: ModelInfo, rows, batch: list[int], *, pad_id: int, intervene, bf16: bool,
                 out) -> None:
    """One right-padded forward of whole requests (context + continuation)."""
    logprob, count, greedy = out
    width = max(len(rows[i][0]) - 1 for i in batch)
    ids = torch.full((len(batch), width), int(pad_id), dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    keep = torch.zeros((len(batch), width), dtype=torch.bool)
    targets = []
    for j, i in enumerate(batch):
        toks, n_cont = rows[i]
        inp = toks[:-1]
        ids[j, : len(inp)] = torch.tensor(inp)
        mask[j, : len(inp)] = 1
        keep[j, len(inp) - n_cont : len(inp)] = True
        targets.extend(toks[-n_cont:])
    logits = _kept_logits(model, info, ids, mask, keep, intervene, bf16)
    lp, hit = _token_scores(logits, targets)
    start = 0
    for i in batch:
        k = rows[i][1]
        logprob[i] = float(lp[start : start + k].sum())
        count[i] = k
        greedy[i] = bool(hit[start : start + k].all())
        start += k


def _token_scores(logits: torch.Tensor, targets: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Per scored position: log p(target) (float64, CPU) and whether the target is the argmax."""
    target = torch.tensor(list(targets), device=logits.device)
    picked = logits.gather(1, target[:, None])[:, 0]
    hit = (logits.argmax(dim=-1) == target).cpu()
    lp = (picked - torch.logsumexp(logits, dim=-1)).double().cpu()
    return lp, hit


# --------------------------------------------------------------------------------------------
# Prefix reuse: the shared context of a question's choices runs once
# --------------------------------------------------------------------------------------------


PREFIX_REUSE = (False, True, "auto")  # score_requests(prefix_reuse=...): never, always, where it saves tokens


def reuse_saves(n_ctx: int, continuations: Sequence[int]) -> bool:
    """Whether running a shared context once saves more tokens than its choices run themselves:
    ``n_ctx * (k - 1) > sum(continuations)`` for ``k`` choices. The shared path costs two forwards
    (the context, then the continuations attending to an expanded cache), and attention over the
    cache is not free, so a context that saves fewer tokens than the continuations cost runs
    whole (PIQA's short goals and long solutions run slower with reuse, ARC's long questions and short
    answers faster: ``benchmarks/bench-harness.json``, made by ``benchmarks/bench_harness.py``)."""
    return n_ctx * (len(continuations) - 1) > sum(continuations)


def _shared_groups(requests: Sequence[Request], truncated: set[int], *,
                   saving_only: bool = False) -> tuple[list[list[int]], list[int]]:
    """Requests grouped by identical context tokens (groups of 2 or more; with ``saving_only``, only
    groups where :func:`reuse_saves`), and the rest."""
    by_ctx: dict[tuple[int, ...], list[int]] = {}
    for i, r in enumerate(requests):
        if i not in truncated:
            by_ctx.setdefault(tuple(r.tokens[: r.n_ctx]), []).append(i)
    groups = [g for g in by_ctx.values() if len(g) > 1 and (
        not saving_only or reuse_saves(requests[g[0]].n_ctx, [len(requests[i].tokens) - requests[i].n_ctx for i in g]))]
    in_group = {i for g in groups for i in g}
    return groups, [i for i in range(len(requests)) if i not in in_group]


def _group_batches(requests: Sequence[Request], groups: list[list[int]], *, batch_size: int,
                   max_tokens: int, max_scored: int) -> list[list[list[int]]]:
    """Groups batched longest context first: at most ``batch_size`` contexts per batch, and the
    context forward, the continuation forward (counted with the context it attends to) and the
    scored positions within ``max_tokens`` / ``max_scored``; a group over a limit runs alone."""
    def sizes(g):
        ctx = requests[g[0]].n_ctx
        conts = [len(requests[i].tokens) - ctx for i in g]
        return ctx, len(g), max(conts) - 1, sum(conts)

    order = sorted(groups, key=lambda g: -requests[g[0]].n_ctx)
    batches: list[list[list[int]]] = []
    current: list[list[int]] = []
    for g in order:
        trial = current + [g]
        s = [sizes(x) for x in trial]
        ctx_w = max(x[0] for x in s)
        n_rows = sum(x[1] for x in s)
        cont_w = max(x[2] for x in s)
        over = (len(trial) > batch_size or len(trial) * ctx_w > max_tokens
                or n_rows * (ctx_w + cont_w) > max_tokens or sum(x[3] for x in s) > max_scored)
        if current and over:
            batches.append(current)
            current = [g]
        else:
            current = trial
    if current:
        batches.append(current)
    return batches


def _expand_cache(pkv, index: torch.Tensor) -> bool:
    """Repeat the cache's batch rows as ``index`` says (in place); False if this cache type has no
    way to (then the caller scores without prefix reuse)."""
    select = getattr(pkv, "batch_select_indices", None)
    if select is None:
        return False
    select(index.to(_cache_device(pkv)))
    return True


def _cache_device(pkv) -> torch.device:
    for layer in getattr(pkv, "layers", []):
        keys = getattr(layer, "keys", None)
        if isinstance(keys, torch.Tensor) and keys.numel():
            return keys.device
    return torch.device("cpu")


def _score_shared(model, info: ModelInfo, requests: Sequence[Request], batch: list[list[int]], *,
                  pad_id: int, intervene, bf16: bool, out) -> bool:
    """Score the groups of ``batch`` with one context forward and one continuation forward.

    Contexts are LEFT-padded to a common width ``W`` (so every row's last context token sits at
    column ``W - 1`` and the first continuation token's logits come from that column of the
    context pass), with explicit position ids ``0..n_ctx-1`` per row: each row's tokens keep their
    positions, and distances between cache slots equal distances between positions, which keeps
    sliding-window attention exact. The cache is expanded to one row per request; the
    continuation inputs (all but their last token) are right-padded after it, at positions
    ``n_ctx + j``; the mask hides the padding of both. Returns False (nothing written) when the
    model takes no cache (:func:`_cache_arg`) or its cache cannot be expanded.
    """
    logprob, count, greedy = out
    cache_arg = _cache_arg(model._module)
    if cache_arg is None:
        return False
    G = len(batch)
    ctx = [list(requests[g[0]].tokens[: requests[g[0]].n_ctx]) for g in batch]
    W = max(len(c) for c in ctx)
    ids = torch.full((G, W), int(pad_id), dtype=torch.long)
    mask = torch.zeros((G, W), dtype=torch.long)
    for j, c in enumerate(ctx):
        ids[j, W - len(c):] = torch.tensor(c)
        mask[j, W - len(c):] = 1
    pos = (mask.cumsum(1) - 1).clamp_min(0)
    kwargs: dict[str, Any] = {"attention_mask": mask, "position_ids": pos}
    if _supports_keep(model._module):
        kwargs["logits_to_keep"] = 1
    first, pkv = _forward(model, info, ids, kwargs, intervene, bf16, want_cache=cache_arg)
    first = first[:, -1].float()  # [G, V]: the prediction after each context
    members = [i for g in batch for i in g]
    owner = torch.tensor([j for j, g in enumerate(batch) for _ in g])
    conts = [list(requests[i].tokens[requests[i].n_ctx:]) for i in members]
    width = max(len(c) for c in conts) - 1
    lp_first, hit_first = _token_scores(first[owner.to(first.device)], [c[0] for c in conts])
    lp_rest = hit_rest = None
    if width > 0:
        if pkv is None or not _expand_cache(pkv, owner):
            return False
        R = len(members)
        cids = torch.full((R, width), int(pad_id), dtype=torch.long)
        cmask = torch.zeros((R, width), dtype=torch.long)
        keep = torch.zeros((R, width), dtype=torch.bool)
        targets = []
        for r, c in enumerate(conts):
            k = len(c) - 1
            if k:
                cids[r, :k] = torch.tensor(c[:-1])
                cmask[r, :k] = 1
                keep[r, :k] = True
                targets.extend(c[1:])
        ctx_len = torch.tensor([len(c) for c in ctx])[owner]
        cpos = ctx_len[:, None] + torch.arange(width)[None]
        full_mask = torch.cat([mask[owner], cmask], 1)
        logits = _kept_logits(model, info, cids, full_mask, keep, intervene, bf16,
                              position_ids=cpos, **{cache_arg: pkv})
        lp_rest, hit_rest = _token_scores(logits, targets)
    start = 0
    for r, (i, c) in enumerate(zip(members, conts)):
        k = len(c) - 1
        total = float(lp_first[r])
        hit = bool(hit_first[r])
        if k:
            total += float(lp_rest[start : start + k].sum())
            hit = hit and bool(hit_rest[start : start + k].all())
            start += k
        logprob[i] = total
        count[i] = len(c)
        greedy[i] = hit
    return True


# --------------------------------------------------------------------------------------------
# Configuration, caching, subsampling
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EvalConfig:
    """How the harness runs (everything here that changes a number is part of the cache key).

    ``context``/``stride``: the sliding window of the perplexity tasks, in tokens (BOS included).
    ``batch_size``/``max_batch_tokens``/``max_logits``: rows, padded tokens and kept logits
    (scored positions × vocabulary; 2**27 floats = 512 MiB) per forward.
    ``seed``: the shuffle that ``limit`` takes the first n items of.
    ``shard_size``: items per cached shard (a killed run resumes at the first missing shard).
    ``bf16``: run the model under bfloat16 autocast (faster on CPUs with AVX512-BF16; scores
    move slightly, so it is part of the cache key).
    """

    PREFIX: ClassVar[str] = "harness"  # its profile keys (profiles.stage): harness_context, ...

    context: int = 512
    stride: int = 256
    batch_size: int = field(default=16, metadata=profiles.key("batch"))
    max_batch_tokens: int = 8192
    max_logits: int = 2**27
    seed: int = 0
    shard_size: int = 256
    bf16: bool = False

    def __post_init__(self):
        if self.context < 2:
            raise ValueError(f"context must be >= 2 tokens, got {self.context}")
        if not 1 <= self.stride <= self.context - 1:
            raise ValueError(f"stride must lie in 1..context-1 = 1..{self.context - 1} (with BOS the "
                             f"window holds context-1 text tokens), got {self.stride}")
        if min(self.batch_size, self.max_batch_tokens, self.max_logits, self.shard_size) < 1:
            raise ValueError("batch_size, max_batch_tokens, max_logits and shard_size must be >= 1")

    def key(self, windows: bool = True) -> dict[str, Any]:
        """The parts of the configuration that change results: the seed, and the window only for
        the perplexity tasks (``windows``). Batching does not (up to float rounding), so it is
        left out and cached results are shared across batch sizes."""
        out: dict[str, Any] = {"seed": self.seed}
        if self.bf16:
            out["bf16"] = True
        if windows:
            out.update(context=self.context, stride=self.stride)
        return out


def select_items(n_total: int, limit: int | None, seed: int) -> np.ndarray:
    """The items a run scores: the first ``limit`` of a seeded permutation (all when None)."""
    if n_total < 1:
        raise ValueError("the task has no items")
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, (int, np.integer)) or limit <= 0:
            raise ValueError(f"limit must be a positive int or None (all items), got {limit!r}")
    order = np.random.default_rng(seed).permutation(n_total)
    return order if limit is None else order[: min(int(limit), n_total)]


def _cache_base(model, info: ModelInfo, tokenizer, task: str, config: EvalConfig,
                intervene: Intervene | None, cache_tag: str | None, *,
                windows: bool = False) -> dict[str, Any] | None:
    """The cache config of a task run, or None when it must not be cached (an intervention
    without a tag: a callable cannot be hashed, so its results are never stored or reused)."""
    if intervene is not None and not cache_tag:
        return None
    return {"task": task, "model": info.name, "source": info.source, "weights": model_fingerprint(model),
            "tokenizer": tokenizer_fingerprint(tokenizer), "prepend_bos": info.prepend_bos,
            "intervention": cache_tag if intervene is not None else None,
            "intervention_code": _cache.code_fingerprint(intervene) if intervene is not None else None,
            **config.key(windows)}


def _sharded(base: dict[str, Any] | None, items: np.ndarray, shard_size: int,
             compute: Callable[[np.ndarray], dict[str, np.ndarray]], *, refresh: bool = False
             ) -> dict[str, np.ndarray]:
    """Run ``compute`` shard by shard over ``items``, caching each shard under ``base`` + the
    hash of its item indices (so runs with different limits share their common shards).

    Each item also gets ``compute_s``: its share of the seconds its shard took to compute, kept in
    the cache, so what scoring costs per item is known on a warm rerun too (notebook 05 prices the
    item counts a benchmark verdict would need with it)."""
    def timed(shard: np.ndarray) -> dict[str, np.ndarray]:
        t0 = time.perf_counter()
        out = compute(shard)
        out["compute_s"] = np.full(len(shard), (time.perf_counter() - t0) / max(1, len(shard)))
        return out

    parts = []
    for start in range(0, len(items), shard_size):
        shard = np.asarray(items[start : start + shard_size])
        if base is None:
            parts.append(timed(shard))
            continue
        digest = hashlib.sha256(shard.astype(np.int64).tobytes()).hexdigest()[:16]
        config = {**base, "items": digest, "n_items": int(len(shard))}
        parts.append(_cache.cached(f"eval-{base['task']}", config, lambda: timed(shard), code=_sharded,
                                   refresh=refresh))
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


# --------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------


@dataclass
class TaskResult:
    """One task's metrics ``{name: (value, se)}`` over ``n`` units (items, or windows for
    perplexity), with the per-item scores in ``details``."""

    task: str
    n: int
    metrics: dict[str, tuple[float, float]]
    details: dict[str, Any] = field(default_factory=dict, repr=False)
    config: dict[str, Any] = field(default_factory=dict)

    def rows(self) -> list[dict[str, Any]]:
        return [{"task": self.task, "metric": m, "value": v, "se": s, "n": self.n}
                for m, (v, s) in self.metrics.items()]


# --------------------------------------------------------------------------------------------
# Perplexity with a sliding window
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Window:
    """Stream tokens ``[begin, end)`` form the window body; tokens ``[first, end)`` are scored."""

    begin: int
    end: int
    first: int


def rolling_windows(n_tokens: int, *, context: int, stride: int, bos: bool) -> list[Window]:
    """Windows covering a stream of ``n_tokens`` so that every token is scored exactly once.

    The body holds ``context - 1`` stream tokens with BOS (prepended to every window), else
    ``context``. The first window scores all its tokens (from token 1 without BOS); each next one
    ends ``stride`` tokens later and scores only those new tokens, so every scored token after the
    first window sees at least ``context - stride`` tokens (BOS counted). ``stride = context - 1``
    gives disjoint windows (overlapping by one token without BOS, like lm-eval's rolling windows).
    """
    body = context - 1 if bos else context
    if context < 2 or not 1 <= stride <= context - 1:
        raise ValueError(f"need 1 <= stride <= context - 1 = {context - 1} (a window of {context} "
                         f"tokens scores at most {context - 1}: BOS, or its first token, has no "
                         f"predictor), got stride {stride}")
    if n_tokens < (1 if bos else 2):
        raise ValueError(f"a stream of {n_tokens} tokens has nothing to score")
    end = min(body, n_tokens)
    windows = [Window(0, end, 0 if bos else 1)]
    while end < n_tokens:
        new_end = min(end + stride, n_tokens)
        windows.append(Window(max(0, new_end - body), new_end, end))
        end = new_end
    return windows


def window_request(tokens: np.ndarray, w: Window, bos_id: int | None) -> Request:
    body = [int(t) for t in tokens[w.begin : w.end]]
    prefix = [int(bos_id)] if bos_id is not None else []
    return Request(tuple(prefix + body), len(prefix) + w.first - w.begin)


@dataclass(frozen=True)
class TextStats:
    tokens: int
    words: int
    bytes: int


def text_stats(text: str, n_tokens: int) -> TextStats:
    """Tokens, whitespace words and UTF-8 bytes of a text (the per-word and per-byte units)."""
    words = len(text.split())
    if words == 0:
        raise ValueError("the text has no words")
    return TextStats(n_tokens, words, len(text.encode("utf-8")))


def text_perplexity(model, info: ModelInfo, tokenizer, text: str, *, task: str = "text",
                    limit: int | None = None, config: EvalConfig = EvalConfig(),
                    intervene: Intervene | None = None, cache_tag: str | None = None,
                    cache: bool = True, progress: bool = False) -> TaskResult:
    """Sliding-window perplexity of ``text`` (definitions in the module docstring).

    ``limit`` scores the first ``limit`` windows of a seeded shuffle (each window's loss does not
    depend on which others are scored; per-word and per-byte values then use the whole text's
    tokens-per-word and tokens-per-byte ratios).
    """
    refuse_remote(info, "evaluate.text_perplexity", _LOCAL_MODULE)
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{task}: the text is empty; nothing to score")
    tokens = tokenize_text(text, tokenizer)
    bos_id = info.bos_token_id if info.prepend_bos else None
    if info.prepend_bos and bos_id is None:
        raise ValueError(f"{info.name} has prepend_bos=True but no BOS token id")
    windows = rolling_windows(len(tokens), context=config.context, stride=config.stride,
                              bos=bos_id is not None)
    items = select_items(len(windows), limit, config.seed)
    base = (_cache_base(model, info, tokenizer, task, config, intervene, cache_tag, windows=True)
            if cache else None)
    if base is not None:
        base["text"] = hashlib.sha256(text.encode()).hexdigest()[:16]

    def compute(shard: np.ndarray) -> dict[str, np.ndarray]:
        reqs = [window_request(tokens, windows[i], bos_id) for i in shard]
        return _score_with(config, model, info, tokenizer, reqs, intervene, progress, task)

    scores = _sharded(base, items, config.shard_size, compute)
    stats = text_stats(text, len(tokens))
    nll, count = -scores["logprob"], scores["tokens"]
    loss, se = ratio_se(nll, count)
    per_word, per_byte = stats.tokens / stats.words, stats.tokens / stats.bytes
    metrics = {
        "loss": (loss, se),
        "ppl": (math.exp(loss), math.exp(loss) * se),
        "word_loss": (loss * per_word, se * per_word),
        "word_ppl": (math.exp(loss * per_word), math.exp(loss * per_word) * se * per_word),
        "bits_per_byte": (loss * per_byte / math.log(2), se * per_byte / math.log(2)),
    }
    return TaskResult(task, len(items), metrics,
                      details={"window_nll": nll, "window_tokens": count, "windows": items,
                               "scored_tokens": int(count.sum()), **asdict(stats)},
                      config={**config.key(), "limit": limit, "windows_total": len(windows)})


def _pad_id(tokenizer) -> int:
    for attr in ("pad_token_id", "eos_token_id", "bos_token_id"):
        value = getattr(tokenizer, attr, None)
        if value is not None:
            return int(value)
    return 0


def wikitext_perplexity(model, info: ModelInfo, tokenizer, corpus: str = "wikitext-103",
                        split: str = "validation", **kwargs) -> TaskResult:
    """Sliding-window perplexity of a WikiText split (detokenized; see the module docstring)."""
    if corpus not in ("wikitext-2", "wikitext-103"):
        raise ValueError(f"corpus must be 'wikitext-2' or 'wikitext-103', got {corpus!r}")
    return text_perplexity(model, info, tokenizer, corpus_text(corpus, split),
                           task=f"{corpus}-{split}", **kwargs)


# --------------------------------------------------------------------------------------------
# Perplexity per document, as lm-eval's `wikitext` task computes it
# --------------------------------------------------------------------------------------------

_HEADING_LEVELS = (("= = =", "==="), ("= =", "=="))


def wikitext_pages(lines: Sequence[str]) -> list[str]:
    """A WikiText split (its lines, without their newlines, the last one the empty string after
    the final newline) cut into articles as the ``EleutherAI/wikitext_document_level`` dataset that
    lm-eval's ``wikitext`` task reads was cut: a new page starts at each top-level heading
    ``" = Title = "`` (a line that, with ``"= = ="`` → ``"==="`` and ``"= ="`` → ``"=="``, starts
    with ``"= "`` and ends with ``" ="``); a page is its lines joined by ``"\\n"``; the text before
    the first heading is kept only if it is not blank; the last page always is."""
    if isinstance(lines, str):
        raise TypeError("pass the split's lines (text.split('\\n')), not one string")
    pages: list[str] = []
    current: list[str] = []
    for line in lines:
        short = line
        for old, new in _HEADING_LEVELS:
            short = short.replace(old, new)
        short = short.strip()
        if short.startswith("= ") and short.endswith(" ="):
            page = "\n".join(current)
            if page.strip():
                pages.append(page)
            current = []
        current.append(line)
    pages.append("\n".join(current))
    return pages


def wikitext_documents(corpus: str = "wikitext-2", split: str = "test") -> list[str]:
    """The articles of a WikiText split (:func:`wikitext_pages` of its lines): 62 in WikiText-2's
    test split, 60 in validation, 629 in train, as in ``EleutherAI/wikitext_document_level``. Our
    files are the tokenized ``-v1`` release (rare words as ``<unk>``); lm-eval reads ``-raw-v1``, which
    has the same lines and words with the rare words spelled out."""
    if corpus not in ("wikitext-2", "wikitext-103"):
        raise ValueError(f"corpus must be 'wikitext-2' or 'wikitext-103', got {corpus!r}")
    lines = list(load_corpus(corpus, split)["text"])
    return wikitext_pages(lines + [""])  # the file ends with a newline: split("\n") ends with ""


def lm_eval_detokenize(page: str) -> str:
    """lm-eval 0.4.13's ``wikitext_detokenizer`` (``tasks/wikitext/preprocess_wikitext.py``), rule
    for rule: the text its ``wikitext`` task scores (ours, :func:`data.detokenize_wikitext`, differs)."""
    s = page.replace("s '", "s'")
    s = re.sub(r"/' [0-9]/", r"/'[0-9]/", s)
    for old, new in ((" @-@ ", "-"), (" @,@ ", ","), (" @.@ ", "."), (" : ", ": "), (" ; ", "; "),
                     (" . ", ". "), (" ! ", "! "), (" ? ", "? "), (" , ", ", ")):
        s = s.replace(old, new)
    s = re.sub(r"\(\s*([^\)]*?)\s*\)", r"(\1)", s)
    s = re.sub(r"\[\s*([^\]]*?)\s*\]", r"[\1]", s)
    s = re.sub(r"{\s*([^}]*?)\s*}", r"{\1}", s)
    s = re.sub(r"\"\s*([^\"]*?)\s*\"", r'"\1"', s)
    s = re.sub(r"'\s*([^']*?)\s*'", r"'\1'", s)
    for old, new in (("= = = =", "===="), ("= = =", "==="), ("= =", "=="), (" \N{DEGREE SIGN} ", "\N{DEGREE SIGN}"),
                     (" \n", "\n"), ("\n ", "\n"), (" N ", " 1 "), (" 's", "'s")):
        s = s.replace(old, new)
    return s


def page_words(page: str) -> int:
    """lm-eval's word count of a page: ``len(re.split(r"\\s+", page))`` on the page BEFORE
    detokenization (so WikiText's ``@-@`` and split punctuation count as words, and a leading or
    trailing blank adds an empty "word", exactly as lm-eval counts)."""
    return len(re.split(r"\s+", page))


def document_windows(n_tokens: int, max_length: int) -> list[Window]:
    """lm-eval's rolling windows of one document (``get_rolling_token_windows`` with
    ``context_len=1``, then ``make_disjoint_window``), as :class:`Window` s over its tokens.

    The first window is the prefix token (BOS, or EOS where there is none) and the first
    ``max_length - 1`` tokens, scoring the first ``max_length`` tokens (the first one given the prefix
    only); every next window scores the next ``max_length`` tokens given the one token before them.
    The last window scores what is left (``w`` tokens) and its input is still ``max_length`` long: it
    is conditioned on the ``max_length - w + 1`` tokens before. Every token is scored exactly once;
    the first window's :class:`Window` has ``first = begin = 0`` and takes the prefix
    (:func:`window_request` with the prefix id), the others take none."""
    if isinstance(max_length, bool) or not isinstance(max_length, (int, np.integer)) or max_length < 2:
        raise ValueError(f"max_length must be an int >= 2 (tokens per forward, lm-eval's max_length), "
                         f"got {max_length!r}")
    if n_tokens < 1:
        raise ValueError("the document has no tokens: nothing to score")
    first = min(max_length, n_tokens)
    windows = [Window(0, first, 0)]
    done = first
    while done < n_tokens:
        take = min(n_tokens - done, max_length)
        end = done + take
        windows.append(Window(end - max_length - 1, end, end - take))
        done = end
    return windows


def document_requests(tokens: Sequence[int], max_length: int, prefix_id: int) -> list[Request]:
    """The scoring requests of one document's windows (:func:`document_windows`)."""
    tokens = np.asarray(tokens)
    return [window_request(tokens, w, prefix_id if k == 0 else None)
            for k, w in enumerate(document_windows(len(tokens), max_length))]


def _prefix_id(tokenizer) -> int:
    """lm-eval's ``prefix_token_id``: the tokenizer's BOS, else its EOS."""
    for attr in ("bos_token_id", "eos_token_id"):
        value = getattr(tokenizer, attr, None)
        if value is not None:
            return int(value)
    raise ValueError("the tokenizer has neither a BOS nor an EOS token to prefix a document with")


def default_max_length(model) -> int:
    """lm-eval's default ``max_length`` for a model: its maximum positions, else 2048."""
    return _max_positions(model._module) or 2048


def document_perplexity(model, info: ModelInfo, tokenizer, pages: Sequence[str], *,
                        task: str = "documents", max_length: int | None = None,
                        limit: int | None = None, config: EvalConfig = EvalConfig(),
                        detokenize: Callable[[str], str] = lm_eval_detokenize,
                        intervene: Intervene | None = None, cache_tag: str | None = None,
                        cache: bool = True, progress: bool = False) -> TaskResult:
    """Perplexity of ``pages`` one document at a time, in lm-eval's definition (its
    ``loglikelihood_rolling`` and its ``wikitext`` task's metrics).

    Each page is detokenized (``detokenize``, lm-eval's rules by default), tokenized whole without
    special tokens (:func:`encode`, as lm-eval's HFLM with ``add_bos_token=False``), and scored in
    :func:`document_windows` of ``max_length`` tokens (default: :func:`default_max_length`, lm-eval's
    own default); the first token of every document is predicted from the prefix token alone.
    Metrics, pooled over documents as lm-eval's ``weighted_perplexity`` does:
    ``word_perplexity`` = exp(sum NLL / sum words), ``byte_perplexity`` = exp(sum NLL / sum bytes),
    ``bits_per_byte`` = sum NLL / sum bytes / ln 2, where words (:func:`page_words`) and UTF-8 bytes
    are counted on the page before detokenization; also ``loss``/``ppl`` per token. SEs: ratio
    estimator with documents as the units. ``limit``: the first ``limit`` documents of the seeded
    shuffle (:func:`select_items`). ``details`` keeps per-document NLL, tokens, words, bytes, windows.
    """
    refuse_remote(info, "evaluate.document_perplexity", _LOCAL_MODULE)
    if len(pages) == 0:
        raise ValueError(f"{task}: no documents to score")
    positions = _max_positions(model._module)
    max_length = default_max_length(model) if max_length is None else max_length
    document_windows(1, max_length)  # validates max_length
    if positions is not None and max_length > positions:
        raise ValueError(f"max_length {max_length} exceeds the model's {positions} positions")
    prefix = _prefix_id(tokenizer)
    items = select_items(len(pages), limit, config.seed)
    for i in items:
        if not pages[i].strip():
            raise ValueError(f"{task}: document {int(i)} is empty; nothing to score")
    base = _cache_base(model, info, tokenizer, task, config, intervene, cache_tag) if cache else None
    if base is not None:
        base.update(pages=hashlib.sha256("\x00".join(pages).encode()).hexdigest()[:16],
                    max_length=int(max_length), prefix=prefix, definition="lm-eval-rolling",
                    detokenize=_cache.code_fingerprint(detokenize))

    def compute(shard: np.ndarray) -> dict[str, np.ndarray]:
        reqs, owner = [], []
        for j, i in enumerate(shard):
            tokens = encode(tokenizer, detokenize(pages[i]))
            if not tokens:
                raise ValueError(f"{task}: document {int(i)} has no tokens after detokenization")
            r = document_requests(tokens, max_length, prefix)
            reqs.extend(r)
            owner.extend([j] * len(r))
        s = _score_with(config, model, info, tokenizer, reqs, intervene, progress, task)
        owner_a = np.asarray(owner)
        n = len(shard)
        return {"logprob": np.bincount(owner_a, s["logprob"], minlength=n),
                "tokens": np.bincount(owner_a, s["tokens"], minlength=n).astype(np.int64),
                "windows": np.bincount(owner_a, minlength=n).astype(np.int64)}

    scores = _sharded(base, items, config.shard_size, compute)
    nll = -scores["logprob"]
    words = np.asarray([page_words(pages[i]) for i in items], dtype=np.int64)
    nbytes = np.asarray([len(pages[i].encode("utf-8")) for i in items], dtype=np.int64)
    loss, se = ratio_se(nll, scores["tokens"])
    word_loss, word_se = ratio_se(nll, words)
    byte_loss, byte_se = ratio_se(nll, nbytes)
    metrics = {
        "loss": (loss, se), "ppl": (math.exp(loss), math.exp(loss) * se),
        "word_loss": (word_loss, word_se),
        "word_perplexity": (math.exp(word_loss), math.exp(word_loss) * word_se),
        "byte_perplexity": (math.exp(byte_loss), math.exp(byte_loss) * byte_se),
        "bits_per_byte": (byte_loss / math.log(2), byte_se / math.log(2)),
    }
    return TaskResult(task, len(items), metrics,
                      details={"documents": items, "doc_nll": nll, "doc_tokens": scores["tokens"],
                               "doc_words": words, "doc_bytes": nbytes, "doc_windows": scores["windows"],
                               "compute_s": scores["compute_s"]},
                      config={**config.key(False), "limit": limit, "max_length": int(max_length),
                              "prefix_token_id": prefix, "documents_total": len(pages),
                              "definition": "lm-eval loglikelihood_rolling, disjoint windows per document"})


def wikitext_document_perplexity(model, info: ModelInfo, tokenizer, corpus: str = "wikitext-2",
                                 split: str = "test", **kwargs) -> TaskResult:
    """:func:`document_perplexity` of a WikiText split's articles (:func:`wikitext_documents`):
    lm-eval's ``wikitext`` task on our (``-v1``) files."""
    return document_perplexity(model, info, tokenizer, wikitext_documents(corpus, split),
                               task=f"{corpus}-{split}-documents", **kwargs)


def unk_handling(tokenizer, pages: Sequence[str]) -> dict[str, Any]:
    """How WikiText-v1's literal ``<unk>`` placeholder reaches the model in the two definitions: ours
    tokenizes it as text (:func:`tokenize_text`), lm-eval's tokenizes each page with the tokenizer's
    defaults (:func:`encode`), which turn it into the tokenizer's own special token where it has one
    named so (Gemma-3: one id; a trained model almost never predicts it). ``doc_unk``: occurrences in
    the scored articles; ``doc_unk_special``: whether lm-eval's tokenization makes each one special token."""
    ids = encode(tokenizer, "<unk>")
    special = len(ids) == 1 and ids[0] in set(getattr(tokenizer, "all_special_ids", []) or [])
    return {"doc_unk": int(sum(p.count("<unk>") for p in pages)), "doc_unk_special": bool(special)}


def perplexity_definitions(model, info: ModelInfo, tokenizer, *, corpus: str = "wikitext-2",
                           split: str = "test", config: EvalConfig = EvalConfig(),
                           window_limit: int | None = None, doc_limit: int | None = None,
                           max_length: int | None = None, progress: bool = False) -> dict[str, Any]:
    """Both perplexities of one model on one WikiText split: ours (:func:`wikitext_perplexity`,
    a strided window of ``config.context``/``config.stride`` over the whole split, ``window_limit``
    windows) and lm-eval's (:func:`wikitext_document_perplexity`, disjoint windows of ``max_length``
    per article, ``doc_limit`` articles). One flat row: token and word perplexity both ways, lm-eval's
    byte perplexity and bits per byte, and what each was computed on."""
    ours = wikitext_perplexity(model, info, tokenizer, corpus, split, limit=window_limit, config=config,
                               progress=progress)
    docs = wikitext_document_perplexity(model, info, tokenizer, corpus, split, limit=doc_limit,
                                        config=config, max_length=max_length, progress=progress)
    m, d = ours.metrics, docs.metrics
    pages = wikitext_documents(corpus, split)
    scored = [pages[i] for i in select_items(len(pages), doc_limit, config.seed)]
    return {"model": info.name, "corpus": f"{corpus}-{split}", **unk_handling(tokenizer, scored),
            "sliding_ppl": m["ppl"][0], "sliding_word_ppl": m["word_ppl"][0],
            "sliding_word_ppl_se": m["word_ppl"][1], "sliding_context": config.context,
            "sliding_stride": config.stride, "sliding_windows": ours.n,
            "sliding_windows_total": ours.config["windows_total"],
            "doc_ppl": d["ppl"][0], "doc_word_ppl": d["word_perplexity"][0],
            "doc_word_ppl_se": d["word_perplexity"][1], "doc_byte_ppl": d["byte_perplexity"][0],
            "doc_bits_per_byte": d["bits_per_byte"][0], "doc_max_length": docs.config["max_length"],
            "documents": docs.n, "documents_total": docs.config["documents_total"]}


def run_perplexities(run, *, corpus: str = "wikitext-2", split: str = "test",
                     window_limit: int | None = None, doc_limit: int | None = None,
                     max_length: int | None = None, config: EvalConfig | None = None,
                     device: str = "cpu", progress: bool = False) -> dict[str, Any]:
    """:func:`perplexity_definitions` of a trained run's final model (``run/model``, as
    ``train.final.final_eval`` loads it). Without ``config`` the sliding window is the model's
    context with half of it as the stride; ``max_length`` defaults to the model's context too."""
    from pathlib import Path

    from ..core.models import load_model

    lm, tok, info = load_model(str(Path(run) / "model"), device=device)
    if config is None:
        context = default_max_length(lm)
        config = EvalConfig(context=context, stride=max(1, context // 2))
    out = perplexity_definitions(lm, info, tok, corpus=corpus, split=split, config=config,
                                 window_limit=window_limit, doc_limit=doc_limit, max_length=max_length,
                                 progress=progress)
    return {**out, "run": Path(run).name}


# --------------------------------------------------------------------------------------------
# LAMBADA
# --------------------------------------------------------------------------------------------


def lambada_split(text: str) -> tuple[str, str]:
    """lm-eval's ``lambada_openai`` split: (context, " " + last space-separated word)."""
    if not isinstance(text, str) or " " not in text.strip():
        raise ValueError(f"a LAMBADA passage needs a context and a last word, got {text!r}")
    context, target = text.rsplit(" ", 1)
    if not target:
        raise ValueError(f"the passage ends with a space, so it has no target word: {text[-40:]!r}")
    return context, " " + target


def lambada_score(model, info: ModelInfo, tokenizer, texts: Sequence[str], *, task: str = "lambada",
                  limit: int | None = None, config: EvalConfig = EvalConfig(),
                  intervene: Intervene | None = None, cache_tag: str | None = None,
                  cache: bool = True, progress: bool = False) -> TaskResult:
    """Last-word accuracy (greedy) and perplexity of the last word over ``texts``."""
    refuse_remote(info, "evaluate.lambada_score", _LOCAL_MODULE)
    if len(texts) == 0:
        raise ValueError(f"{task}: no passages to score")
    items = select_items(len(texts), limit, config.seed)
    bos_id = info.bos_token_id if info.prepend_bos else None
    base = _cache_base(model, info, tokenizer, task, config, intervene, cache_tag) if cache else None
    if base is not None:  # the passages themselves: other bytes are another result
        base["texts"] = hashlib.sha256("\x00".join(texts).encode()).hexdigest()[:16]

    def compute(shard: np.ndarray) -> dict[str, np.ndarray]:
        reqs = []
        for i in shard:
            ctx, cont = encode_pair(tokenizer, *lambada_split(texts[i]), bos_id=bos_id)
            reqs.append(Request(tuple(ctx + cont), len(ctx)))
        return _score_with(config, model, info, tokenizer, reqs, intervene, progress, task)

    scores = _sharded(base, items, config.shard_size, compute)
    acc = float(scores["greedy"].mean())
    loss, loss_se = mean_se(-scores["logprob"])
    metrics = {"acc": (acc, binomial_se(acc, len(items))), "ppl": (math.exp(loss), math.exp(loss) * loss_se),
               "loss": (loss, loss_se)}
    return TaskResult(task, len(items), metrics, details={**scores, "items": items},
                      config={**config.key(False), "limit": limit})


# --------------------------------------------------------------------------------------------
# Multiple choice (PIQA, ARC)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Question:
    context: str
    choices: tuple[str, ...]
    gold: int


def piqa_questions() -> list[Question]:
    ds = load_corpus("piqa", "validation")
    return [Question(f"Question: {r['goal']}\nAnswer:", (r["sol1"], r["sol2"]), int(r["label"]))
            for r in ds]


def arc_questions(name: str) -> list[Question]:
    out = []
    for r in load_corpus(name, "test"):
        query = r["query"] if r["query"].startswith("Question: ") else "Question: " + r["query"]
        out.append(Question(f"{query}\nAnswer:", tuple(r["choices"]), int(r["gold"])))
    return out


def multiple_choice_score(model, info: ModelInfo, tokenizer, questions: Sequence[Question], *,
                          task: str = "multiple-choice", limit: int | None = None,
                          config: EvalConfig = EvalConfig(), intervene: Intervene | None = None,
                          cache_tag: str | None = None, cache: bool = True,
                          progress: bool = False) -> TaskResult:
    """Zero-shot multiple choice by log-likelihood of ``" " + choice`` given the context."""
    refuse_remote(info, "evaluate.multiple_choice_score", _LOCAL_MODULE)
    if len(questions) == 0:
        raise ValueError(f"{task}: no questions to score")
    items = select_items(len(questions), limit, config.seed)
    bos_id = info.bos_token_id if info.prepend_bos else None
    base = _cache_base(model, info, tokenizer, task, config, intervene, cache_tag) if cache else None
    if base is not None:  # the questions themselves: other bytes are another result
        base["questions"] = hashlib.sha256(json.dumps([[q.context, list(q.choices), q.gold] for q in questions])
                                           .encode()).hexdigest()[:16]

    def compute(shard: np.ndarray) -> dict[str, np.ndarray]:
        reqs, owner = [], []
        for i in shard:
            q = questions[i]
            for choice in q.choices:
                ctx, cont = encode_pair(tokenizer, q.context, " " + choice, bos_id=bos_id)
                reqs.append(Request(tuple(ctx + cont), len(ctx)))
                owner.append(i)
        s = _score_with(config, model, info, tokenizer, reqs, intervene, progress, task)
        out = {"pred": [], "pred_norm": [], "acc": [], "acc_norm": []}
        start = 0
        for i in shard:
            q = questions[i]
            m = multiple_choice_metrics(s["logprob"][start : start + len(q.choices)], q.choices, q.gold)
            start += len(q.choices)
            for k in out:
                out[k].append(m[k])
        return {k: np.asarray(v) for k, v in out.items()}

    scores = _sharded(base, items, config.shard_size, compute)
    metrics = {}
    for name in ("acc", "acc_norm"):
        p = float(scores[name].mean())
        metrics[name] = (p, binomial_se(p, len(items)))
    return TaskResult(task, len(items), metrics, details={**scores, "items": items},
                      config={**config.key(False), "limit": limit})


# --------------------------------------------------------------------------------------------
# The task registry and the summary
# --------------------------------------------------------------------------------------------


def _wikitext_task(corpus: str, split: str):
    def run(model, info, tokenizer, **kw):
        return wikitext_perplexity(model, info, tokenizer, corpus, split, **kw)
    return run


_ITEMS: dict[str, Callable[[], Sequence]] = {
    "lambada": lambda: load_corpus("lambada", "test")["text"],
    "piqa": piqa_questions,
    "arc-easy": lambda: arc_questions("arc-easy"),
    "arc-challenge": lambda: arc_questions("arc-challenge"),
}
"""The items of each zero-shot task: LAMBADA's passages, the multiple-choice tasks' questions."""


def _lambada_task(model, info, tokenizer, **kw):
    return lambada_score(model, info, tokenizer, _ITEMS["lambada"](), **kw)


def _mc_task(name: str, questions: Callable[[], list[Question]]):
    def run(model, info, tokenizer, **kw):
        return multiple_choice_score(model, info, tokenizer, questions(), task=name, **kw)
    return run


TASKS: dict[str, Callable[..., TaskResult]] = {
    "wikitext-2-validation": _wikitext_task("wikitext-2", "validation"),
    "wikitext-2-test": _wikitext_task("wikitext-2", "test"),
    "wikitext-103-validation": _wikitext_task("wikitext-103", "validation"),
    "wikitext-103-test": _wikitext_task("wikitext-103", "test"),
    "lambada": _lambada_task,
    "piqa": _mc_task("piqa", _ITEMS["piqa"]),
    "arc-easy": _mc_task("arc-easy", _ITEMS["arc-easy"]),
    "arc-challenge": _mc_task("arc-challenge", _ITEMS["arc-challenge"]),
}

DEFAULT_TASKS = ("wikitext-103-validation", "lambada", "piqa", "arc-easy", "arc-challenge")


def task_items(task: str) -> Sequence:
    """Every item of a zero-shot task, in the order the task scores them (``limit=n`` scores the
    first ``n``): LAMBADA's passages, the multiple-choice tasks' :class:`Question` s."""
    if task not in _ITEMS:
        raise KeyError(f"{task!r} has no items (a perplexity task scores windows); the item tasks are "
                       f"{', '.join(_ITEMS)}")
    return _ITEMS[task]()


def task_size(task: str) -> int:
    """How many items a zero-shot task has in all (what ``limit=None`` scores): a sample size
    computed for a task can then be checked against what the task can give."""
    return len(task_items(task))


def run_task(model, info: ModelInfo, task: str, *, tokenizer=None, **kwargs) -> TaskResult:
    """Score one named task (``TASKS``); keyword arguments as in the task functions."""
    refuse_remote(info, "evaluate.run_task", _LOCAL_MODULE)
    if task not in TASKS:
        raise KeyError(f"unknown task {task!r}; known: {', '.join(TASKS)}")
    tokenizer = tokenizer if tokenizer is not None else getattr(model, "tokenizer", None)
    if tokenizer is None:
        raise ValueError("pass tokenizer= (the model carries none)")
    return TASKS[task](model, info, tokenizer, **kwargs)

# --------------------------------------------------------------------------------------------
# Scoring a model with a short context (the small trained GPTs): which items it can be asked,
# what a guess would score, and the per-item 0/1 scores the benchmark rules read
# --------------------------------------------------------------------------------------------

PPL_TASKS = ("wikitext-2-validation", "wikitext-2-test", "wikitext-103-validation", "wikitext-103-test")
ZERO_SHOT = ("lambada", "piqa", "arc-easy", "arc-challenge")
MC_TASKS = ("piqa", "arc-easy", "arc-challenge")
_FIT: dict[tuple, list] = {}


def fitting_questions(task: str, tokenizer, info: ModelInfo, context: int) -> list[Question]:
    """The questions of a multiple-choice task whose every answer fits the model's context (the
    harness keeps the end of a long context but cannot cut an answer): at context 128 a few long PIQA
    solutions do not fit. The kept share: :func:`kept_share`."""
    key = (task, tokenizer_fingerprint(tokenizer), context)
    if key not in _FIT:
        qs = piqa_questions() if task == "piqa" else arc_questions(task)
        bos = info.bos_token_id if info.prepend_bos else None
        keep = []
        for q in qs:
            lens_ = [len(encode_pair(tokenizer, q.context, " " + c, bos_id=bos)[1]) for c in q.choices]
            if max(lens_) < context - 1:
                keep.append(q)
        _FIT[key] = (keep, len(qs))
    return _FIT[key][0]


def kept_share(task: str, tokenizer, info: ModelInfo, context: int) -> tuple[int, int]:
    """(questions kept, questions in the task) by :func:`fitting_questions`."""
    fitting_questions(task, tokenizer, info, context)
    keep, total = _FIT[(task, tokenizer_fingerprint(tokenizer), context)]
    return len(keep), total


def chance_accuracy(task: str, items: np.ndarray, tokenizer, info: ModelInfo, context: int) -> float:
    """Accuracy of a uniform guess on the scored items: 1/choices for multiple choice; LAMBADA (greedy
    completion of the last word): 1/vocabulary, i.e. about 0."""
    if task == "lambada":
        return 1.0 / len(tokenizer)
    qs = fitting_questions(task, tokenizer, info, context)
    return float(np.mean([1.0 / len(qs[int(i)].choices) for i in items]))


def item_correct(result: TaskResult) -> np.ndarray:
    """Per-item 0/1 scores of a zero-shot task: greedy match (LAMBADA) or accuracy (multiple choice)."""
    d = result.details
    return np.asarray(d["greedy"] if "greedy" in d else d["acc"], dtype=np.float64)



def evaluate_all(model, info: ModelInfo, tasks: Sequence[str] = DEFAULT_TASKS, *,
                 limits: dict[str, int | None] | int | None = None, tokenizer=None,
                 config: EvalConfig = EvalConfig(), intervene: Intervene | None = None,
                 cache_tag: str | None = None, cache: bool = True, progress: bool = False):
    """Score ``tasks`` and return a ``pandas.DataFrame`` with columns task, metric, value, se, n
    (plus model, and intervention: None for the bare model, else ``cache_tag`` or
    "intervened (untagged)"). ``limits`` is one limit for all tasks or ``{task: limit}``
    (missing tasks: all items)."""
    refuse_remote(info, "evaluate.evaluate_all", _LOCAL_MODULE)
    if isinstance(tasks, str):
        tasks = [tasks]
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        raise KeyError(f"unknown tasks {unknown}; known: {', '.join(TASKS)}")
    if isinstance(limits, dict):
        extra = [t for t in limits if t not in TASKS]
        if extra:
            raise KeyError(f"limits name unknown tasks {extra}; known: {', '.join(TASKS)}")
    rows = []
    for task in tasks:
        limit = limits.get(task) if isinstance(limits, dict) else limits
        result = run_task(model, info, task, tokenizer=tokenizer, limit=limit, config=config,
                          intervene=intervene, cache_tag=cache_tag, cache=cache, progress=progress)
        rows.extend(result.rows())
    frame = pd.DataFrame(rows, columns=["task", "metric", "value", "se", "n"])
    frame.insert(0, "model", info.name)
    frame["intervention"] = None if intervene is None else (cache_tag or "intervened (untagged)")
    return frame


def results_json(frame) -> str:
    """A DataFrame from ``evaluate_all`` as JSON records (for save_numbers or a report)."""
    return json.dumps(frame.to_dict(orient="records"), indent=2, default=float)


def _score_with(config, model, info, tokenizer, reqs, intervene, progress, task):
    """``score_requests`` with the batching limits and precision of an evaluation config."""
    return score_requests(model, info, reqs, batch_size=config.batch_size,
                          max_batch_tokens=config.max_batch_tokens, max_logits=config.max_logits,
                          pad_id=_pad_id(tokenizer), intervene=intervene, progress=progress,
                          desc=task, bf16=config.bf16)
