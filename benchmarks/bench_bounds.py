"""Every stage's time as a multiple of its FLOP bound on this machine (issue 37).

The bound of a stage is the time its matrix products would take if each ran at the sustained fp32
``torch.matmul`` rate this CPU reaches at that product's shape, with the thread count the stage
uses: ``bound_s = sum over GEMMs of count x seconds(one matmul of that shape)``, each shape timed
here on random tensors (``out=`` preallocated, median of a few repeats). Everything that is not a
matrix product (norms, softmax, the lens's metric kernels, the optimizer, nnsight's tracing, Python)
is what the multiple ``measured_s / bound_s`` above 1 pays for.

FLOP counts (one multiply-add = 2 FLOPs; a GEMM ``[m x k] @ [k x n]`` batched ``b`` times costs
``2 b m k n``), from the model's config and the stage's config at profile ``default``
(``residshift.core.profiles``). Per block, with ``N = B T`` tokens, the block's weight matrices
``W [k x n]`` (attention projections and MLP: :func:`block_matrices`) and ``H`` query heads of
width ``hd``:

- forward of a block   = ``sum_W 2 N k n + 2 . 2 B H T^2 hd``  (projections + MLP, then ``QK^T`` and ``PV``);
- unembedding of R rows = ``2 R d V``;
- backward, weights trained = 2 x forward (``dX = dY W^T`` and ``dW = X^T dY`` per product);
- backward, weights frozen  = 1 x forward for the projections and the head (``dX`` only),
  2 x forward for attention (both operands of ``QK^T`` and ``PV`` carry gradients).

Stages (one timed *unit* each; ``units_default`` of them make the stage at profile ``default``):

- ``lens``: ``lens.corpus_metrics`` on one batch (``lens_batch`` windows of ``lens_window``): forward
  of the L blocks (no head: the trace stops after the last block) + unembedding of ``lens_positions``
  positions per window at each of the L+1 residuals: ``F_blocks(B, T) + 2 (L+1) B P d V``.
- ``tuned-lens step``: one KL step of the fit on residuals already collected (``tuned_batch`` windows
  of ``tuned_window``, ``R = B (T - 1)`` rows after the first position, a ``tuned_vocab`` head ``K``):
  target head on ``h_L`` (``2 R d K``) + per layer l < L the translator (``2 R d^2``) and the head
  (``2 R d K``) forward, and backward of the head (``dX``: ``2 R d K``) and of the translator
  (``dW`` only, ``h_l`` is data: ``2 R d^2``); Adam on the translators. The residual collection
  (each training window once) is the lens's forward and is not part of the step.
- ``sweep cell``: one (layer, alpha) replay of ``sweep_batch`` windows of ``sweep_window``
  (``attenuate.sweep``): blocks ``l..L-1`` + full head at every position:
  ``(L - l) F_block(B, T) + 2 B T d V``; timed at ``l = L // 2`` (the sweep's mean depth).
- ``gate-fit step``: ``gates.train_step`` on ``gate_batch`` windows of ``gate_window`` with token gates
  on every layer: forward ``F_blocks(B, T) + 2 B T d V``, backward frozen-weight through blocks
  ``1..L-1`` and the head (block 0's input is the embedding: nothing upstream needs a gradient).
- ``item scoring``: ``evaluate.multiple_choice_score`` / ``lambada_score`` on ``eval_items`` items of
  each of notebook 05's tasks; the batch shapes depend on the items (padding, shared contexts,
  kept positions), so its GEMMs are recorded from one untimed run (:class:`GemmRecorder`: every
  ``mm``/``addmm``/``bmm``/attention call's shape) and the same formula is applied to them.
- ``training step``: one trainer step of the ``default`` GPT (``bench_train.Variant``: forward,
  ``next_token_losses``, backward, clipping, fused AdamW) on ``train_batch`` x ``train_context``
  tokens: ``3 (F_blocks(B, T) + 2 B T d V)`` (weights trained, tied head included).

The counting is checked against ``torch.utils.flop_counter.FlopCounterMode`` on tiny models
(``tests/test_bench_bounds.py``; :func:`flop_counter` adds the CPU attention kernel it does not
count): forward exact, backward within 2 % (the attention kernel's recompute).

Bound and stage are timed interleaved in the same process, ``--rounds`` rounds of (bound of the
stage, the stage), alternating which goes first; the 1-minute load average is recorded around
every round: other processes share the cores. Load only ever adds time, so the headline numbers
are best-of: ``measured_s`` is the stage's fastest round and ``bound_s`` sums each product's
fastest timing in the run (every shape is timed again in every round of every stage that uses
it); ``multiple = measured_s / bound_s``. ``multiple_median_paired`` is the median over rounds of
(stage / bound timed beside it), which load moves more.

Targets (issue 37): every stage within 2x of its bound, the lens and the training step within 1.5x.

    nice env HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_bounds.py --json benchmarks/bench-bounds.json
    .venv/bin/python benchmarks/bench_bounds.py --quick --json /tmp/bench-bounds-quick.json  # tiny models, seconds
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as `python -m residshift train` sets it

import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from residshift.core import profiles  # noqa: E402
from residshift.core.machine import cpu_facts, use_reproducible_kernels  # noqa: E402

use_reproducible_kernels()  # as the study runs (`python -m residshift`, the Makefile): before any matmul

TARGETS = {"lens": 1.5, "training step": 1.5}
DEFAULT_TARGET = 2.0
STAGES = ("lens", "tuned-lens step", "sweep cell", "gate-fit step", "item scoring", "training step")


# --------------------------------------------------------------------------------------------
# GEMMs and their FLOPs
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Gemm:
    """``count`` products ``[m x k] @ [k x n]``, each batched ``b`` times."""

    what: str
    b: int
    m: int
    k: int
    n: int
    count: int = 1

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return (self.b, self.m, self.k, self.n)

    @property
    def flops(self) -> int:
        return 2 * self.b * self.m * self.k * self.n * self.count


@dataclass(frozen=True)
class Arch:
    """What the FLOP formulas need of a decoder: layers, width, heads, vocabulary, block matrices."""

    layers: int
    d: int
    heads: int
    head_dim: int
    vocab: int
    matrices: tuple[tuple[int, int], ...]  # the (k, n) of every weight matrix of one block


def block_matrices(config) -> tuple[tuple[int, int], ...]:
    """The ``(in, out)`` of each weight matrix one block multiplies by, read from a model config:
    Llama / Gemma-3 (separate q, k, v, o; gated MLP: gate, up, down), GPT-2 (fused ``c_attn``,
    ``c_proj``, MLP ``c_fc``, ``c_proj``) and ``residshift.core.models.gpt`` (GPT-2's layout; GEGLU doubles
    ``c_fc``)."""
    if hasattr(config, "n_embd"):
        d = config.n_embd
        hidden = getattr(config, "n_inner", None) or 4 * d
        fc = 2 * hidden if getattr(config, "mlp", "gelu") == "geglu" else hidden
        return ((d, 3 * d), (d, d), (d, fc), (hidden, d))
    d, H = config.hidden_size, config.num_attention_heads
    hd = getattr(config, "head_dim", None) or d // H
    kv = getattr(config, "num_key_value_heads", None) or H
    ff = config.intermediate_size
    return ((d, H * hd), (d, kv * hd), (d, kv * hd), (H * hd, d), (d, ff), (d, ff), (ff, d))


def arch_of(config) -> Arch:
    """:class:`Arch` of a Hugging Face config (Llama, Gemma-3, GPT-2) or a ``core.models.gpt.GPTConfig``."""
    L = getattr(config, "num_hidden_layers", None) or config.n_layer
    d = getattr(config, "hidden_size", None) or config.n_embd
    H = getattr(config, "num_attention_heads", None) or config.n_head
    hd = getattr(config, "head_dim", None) or d // H
    return Arch(L, d, H, hd, config.vocab_size, block_matrices(config))


def merge(gemms: list[Gemm]) -> list[Gemm]:
    """One entry per (what, shape), counts summed (same order of first appearance)."""
    out: dict[tuple, Gemm] = {}
    for g in gemms:
        key = (g.what, g.shape)
        old = out.get(key)
        out[key] = g if old is None else Gemm(g.what, g.b, g.m, g.k, g.n, old.count + g.count)
    return list(out.values())


def block_gemms(a: Arch, B: int, T: int, blocks: int, *, kv_len: int | None = None) -> list[Gemm]:
    """Forward of ``blocks`` blocks on ``B`` sequences of ``T`` tokens (attending to ``kv_len``)."""
    S = T if kv_len is None else kv_len
    out = [Gemm("linear", 1, B * T, k, n, blocks) for k, n in a.matrices]
    out += [Gemm("attn QK^T", B * a.heads, T, a.head_dim, S, blocks),
            Gemm("attn PV", B * a.heads, T, S, a.head_dim, blocks)]
    return merge(out)


def head_gemm(a: Arch, rows: int, count: int = 1, vocab: int | None = None) -> Gemm:
    return Gemm("unembed", 1, rows, a.d, a.vocab if vocab is None else vocab, count)


def backward(gemms: list[Gemm], *, weights: bool) -> list[Gemm]:
    """The GEMMs of the backward of ``gemms``: ``dA = dC B^T`` (``[m x n] @ [n x k]``) always and
    ``dB = A^T dC`` (``[k x m] @ [m x n]``) for the weights when ``weights`` and for attention's
    second operand always (K and V carry gradients)."""
    out = []
    for g in gemms:
        out.append(Gemm(g.what + " dX", g.b, g.m, g.n, g.k, g.count))
        if weights or g.what.startswith("attn"):
            out.append(Gemm(g.what + " dW", g.b, g.k, g.m, g.n, g.count))
    return merge(out)


def total_flops(gemms: list[Gemm]) -> int:
    return sum(g.flops for g in gemms)


# --------------------------------------------------------------------------------------------
# Each stage's GEMMs (one unit) from the model config and the profile
# --------------------------------------------------------------------------------------------


def lens_gemms(a: Arch, P) -> list[Gemm]:
    B, T = P.lens_batch, P.lens_window
    pos = P.lens_positions or (T - 2)
    return block_gemms(a, B, T, a.layers) + [head_gemm(a, B * pos, a.layers + 1)]


def tuned_step_gemms(a: Arch, P) -> list[Gemm]:
    R, K, L = P.tuned_batch * (P.tuned_window - 1), P.tuned_vocab or a.vocab, a.layers
    fwd = [Gemm("translator", 1, R, a.d, a.d, L), head_gemm(a, R, L, K)]
    bwd = [Gemm("translator dW", 1, a.d, R, a.d, L), Gemm("unembed dX", 1, R, K, a.d, L)]
    return [head_gemm(a, R, 1, K)] + fwd + bwd


def sweep_cell_gemms(a: Arch, P, layer: int | None = None) -> list[Gemm]:
    layer = a.layers // 2 if layer is None else layer
    B, T = P.sweep_batch, P.sweep_window
    return block_gemms(a, B, T, a.layers - layer) + [head_gemm(a, B * T)]


def gate_step_gemms(a: Arch, P) -> list[Gemm]:
    B, T = P.gate_batch, P.gate_window
    fwd = block_gemms(a, B, T, a.layers) + [head_gemm(a, B * T)]
    return fwd + backward(block_gemms(a, B, T, a.layers - 1) + [head_gemm(a, B * T)], weights=False)


def train_step_gemms(a: Arch, B: int, T: int) -> list[Gemm]:
    fwd = block_gemms(a, B, T, a.layers) + [head_gemm(a, B * T)]
    return fwd + backward(fwd, weights=True)


def units_default(a: Arch, P) -> dict[str, int]:
    """How many units each stage runs at the profile (per model; the sweep: cells of one batch,
    the gate fits: steps of every fit at most, the item scoring: one unit = the timed items)."""
    sweep_layers = a.layers
    cells = sweep_layers * sum(1 for x in P.sweep_alphas if float(x) != 1.0) * -(-P.sweep_windows // P.sweep_batch)
    fits = len(P.gate_kinds) * len(P.gate_seeds)
    return {"lens": -(-P.lens_windows // P.lens_batch), "tuned-lens step": P.tuned_steps,
            "sweep cell": cells, "gate-fit step": fits * P.gate_steps, "item scoring": 1}


# --------------------------------------------------------------------------------------------
# Recording the GEMMs a piece of code runs (item scoring; the tests' cross-check)
# --------------------------------------------------------------------------------------------


class GemmRecorder(TorchDispatchMode):
    """Records every ``mm`` / ``addmm`` / ``bmm`` / ``baddbmm`` and scaled-dot-product attention call as
    :class:`Gemm` s (attention as its ``QK^T`` and ``PV`` products, with the query heads)."""

    def __init__(self):
        super().__init__()
        self.gemms: list[Gemm] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.__name__.split(".")[0]
        if name in ("mm", "addmm", "bmm", "baddbmm"):
            x, y = (args[1], args[2]) if name in ("addmm", "baddbmm") else (args[0], args[1])
            if x.ndim == 2:
                self.gemms.append(Gemm("linear", 1, x.shape[0], x.shape[1], y.shape[1]))
            else:
                self.gemms.append(Gemm("bmm", x.shape[0], x.shape[1], x.shape[2], y.shape[2]))
        elif "scaled_dot_product" in name and "backward" not in name:
            q, k = args[0], args[1]
            bh = q.shape[0] * q.shape[1]
            self.gemms.append(Gemm("attn QK^T", bh, q.shape[2], q.shape[3], k.shape[2]))
            self.gemms.append(Gemm("attn PV", bh, q.shape[2], k.shape[2], q.shape[3]))
        return func(*args, **(kwargs or {}))


def flop_counter() -> "torch.utils.flop_counter.FlopCounterMode":
    """``FlopCounterMode`` that also counts the CPU's fused attention (torch 2.13 counts the CUDA
    attention kernels only: ``_scaled_dot_product_flash_attention_for_cpu`` and its backward would
    count 0). Its attention backward counts 2.5x the forward (the kernel recomputes ``QK^T``), our
    formula the 2x that backpropagation needs, so the two differ by that recompute (1-2 % on the
    tiny models)."""
    from torch.utils import flop_counter as fc

    aten = torch.ops.aten

    def forward(q, k, v, *args, out_shape=None, **kwargs):
        return fc.sdpa_flop_count(q, k, v)

    def backward(grad_out, q, k, v, *args, out_shape=None, **kwargs):
        return fc.sdpa_backward_flop_count(grad_out, q, k, v)

    mapping = {aten._scaled_dot_product_flash_attention_for_cpu: forward,
               aten._scaled_dot_product_flash_attention_for_cpu_backward: backward}
    return fc.FlopCounterMode(display=False, custom_mapping=mapping)


# --------------------------------------------------------------------------------------------
# Timing the bound
# --------------------------------------------------------------------------------------------


class GemmTimer:
    """Seconds of one fp32 ``torch.matmul`` per shape (tensors allocated once per shape)."""

    def __init__(self, min_s: float = 0.05, repeats: int = 3):
        self.min_s, self.repeats = min_s, repeats
        self.seconds: dict[tuple, list[float]] = {}

    def time_shape(self, shape: tuple[int, int, int, int]) -> float:
        """Seconds of one product of ``shape``: the faster of the two layouts a stage's products come
        in (``x @ y`` and ``x @ w.T``, the second what ``F.linear`` runs) for unbatched shapes."""
        b, m, k, n = shape
        g = torch.Generator().manual_seed(0)
        lead = (b,) if b > 1 else ()
        x, out = torch.randn(*lead, m, k, generator=g), torch.empty(*lead, m, n)
        ys = [torch.randn(*lead, k, n, generator=g)]
        if b == 1:
            ys.append(torch.randn(n, k, generator=g).T)
        s = min(self._time(x, y, out) for y in ys)
        self.seconds.setdefault(shape, []).append(s)
        return s

    def _time(self, x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> float:
        torch.matmul(x, y, out=out)  # warm-up
        calls = 1
        while True:
            t0 = time.perf_counter()
            for _ in range(calls):
                torch.matmul(x, y, out=out)
            dt = time.perf_counter() - t0
            if dt >= self.min_s or calls >= 4096:
                break
            calls *= 2
        per = [dt / calls]
        for _ in range(self.repeats - 1):
            t0 = time.perf_counter()
            for _ in range(calls):
                torch.matmul(x, y, out=out)
            per.append((time.perf_counter() - t0) / calls)
        return statistics.median(per)

    def bound(self, gemms: list[Gemm]) -> float:
        """Seconds of ``gemms`` at their shapes' rates, every shape timed now."""
        return sum(g.count * self.time_shape(g.shape) for g in merge_shapes(gemms))

    def best_bound(self, gemms: list[Gemm]) -> float:
        """Seconds of ``gemms`` at the fastest rate each shape reached in this run (the sustained rate
        when the process had its cores: load only adds time)."""
        return sum(g.count * min(self.seconds[g.shape]) for g in merge_shapes(gemms))

    def rates(self) -> list[dict[str, Any]]:
        rows = []
        for (b, m, k, n), ss in sorted(self.seconds.items()):
            s = min(ss)
            rows.append({"shape": [b, m, k, n], "gflops": float(f"{2 * b * m * k * n / s / 1e9:.4g}"),
                         "seconds": round(s, 6), "timings": len(ss)})
        return rows


def merge_shapes(gemms: list[Gemm]) -> list[Gemm]:
    out: dict[tuple, int] = {}
    for g in gemms:
        out[g.shape] = out.get(g.shape, 0) + g.count
    return [Gemm("any", *shape, count) for shape, count in out.items()]


# --------------------------------------------------------------------------------------------
# The stages (each: a unit to time and its GEMMs)
# --------------------------------------------------------------------------------------------


@dataclass
class Stage:
    name: str
    model: str
    unit: str
    run: Callable[[], Any]
    gemms: list[Gemm]
    units_default: int | None = None


def random_windows(info, n: int, T: int, seed: int = 0) -> torch.Tensor:
    """Token windows of random ids (the time of a matrix product does not depend on the text)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, info.vocab_size, (n, T), generator=g)
    if info.prepend_bos and info.bos_token_id is not None:
        ids[:, 0] = info.bos_token_id
    return ids


def lens_stage(lm, info, a: Arch, P, quick: bool) -> Stage:
    from residshift.measure import lens

    lens.COMPILE = "never" if quick else "always"  # the default profile's pass is compiled (work >= 1e9)
    wins = random_windows(info, P.lens_batch, P.lens_window)
    opt = lens.LensOptions(positions=P.lens_positions, seed=P.seed)
    run = lambda: lens.corpus_metrics(lm, info, wins, batch=P.lens_batch, options=opt)  # noqa: E731
    run()  # compile / warm-up
    pos = P.lens_positions or P.lens_window - 2
    return Stage("lens", info.name, f"{P.lens_batch} windows x {P.lens_window}, {pos} positions decoded",
                 run, lens_gemms(a, P))


def tuned_stage(lm, info, a: Arch, P) -> Stage:
    from residshift.core.unembed import Unembed
    from residshift.measure import tuned_lens as TL

    wins = random_windows(info, P.tuned_batch, P.tuned_window)
    hs = TL.collect_residuals(lm, info, wins)
    t_lens = TL.TunedLens(info)
    opt = torch.optim.Adam(t_lens.parameters(), lr=P.tuned_lr)
    K = min(P.tuned_vocab or info.vocab_size, info.vocab_size)
    head = Unembed(info, vocab=torch.arange(K))  # the K most frequent tokens in a fit: the shape is what counts

    def run():
        TL._layer_losses(info, t_lens, hs, lambda loss: loss.backward(), skip_first=1, head=head)
        opt.step()
        opt.zero_grad(set_to_none=True)

    return Stage("tuned-lens step", info.name, f"{P.tuned_batch} windows x {P.tuned_window}, head of {K} tokens",
                 run, tuned_step_gemms(a, P))


def sweep_stage(lm, info, a: Arch, P) -> Stage:
    from residshift.core.replay import capture, replay
    from residshift.core.unembed import next_token_losses

    module = lm._module
    wins = random_windows(info, P.sweep_batch, P.sweep_window)
    cap = capture(module, info, wins, keep_logits=False)
    layer = a.layers // 2
    run = lambda: next_token_losses(replay(module, info, cap, layer, 0.5), cap.ids).mean(1)  # noqa: E731
    return Stage("sweep cell", info.name, f"{P.sweep_batch} windows x {P.sweep_window}, layer {layer}",
                 run, sweep_cell_gemms(a, P, layer))


def gate_stage(lm, info, a: Arch, P) -> Stage:
    from residshift.attenuate import gates as G

    wins = random_windows(info, P.gate_batch, P.gate_window)
    g = G.make_gates("token", range(info.n_layers), info.d_model)
    opt = torch.optim.Adam(g.parameters(), lr=P.gate_lr)

    def run():
        G.train_step(lm, info, g, wins)
        opt.step()
        opt.zero_grad(set_to_none=True)

    return Stage("gate-fit step", info.name, f"{P.gate_batch} windows x {P.gate_window}, token gates",
                 run, gate_step_gemms(a, P))


def quick_questions():
    from residshift.measure.evaluate import Question

    return [Question(f"Question: what follows {i}?\nAnswer:", (f" {i + 1}", f" {i + 2} or more"), 0)
            for i in range(6)]


def item_stage(lm, info, tok, a: Arch, P, quick: bool) -> Stage:
    from residshift.measure import evaluate as ev

    cfg = profiles.stage(ev.EvalConfig, P)
    if quick:
        data, tasks = {"quick": quick_questions()}, ("quick",)
    else:
        from residshift.study.attenuation import BENCH_TASKS

        tasks = BENCH_TASKS
        data = {t: ev.task_items(t) for t in tasks}

    def run():
        for task in tasks:
            kw = dict(limit=P.eval_items, config=cfg, cache=False)
            if task == "lambada":
                ev.lambada_score(lm, info, tok, data[task], **kw)
            else:
                ev.multiple_choice_score(lm, info, tok, data[task], task=task, **kw)

    run()  # warm-up
    with torch.no_grad(), GemmRecorder() as rec:
        run()
    n = sum(min(P.eval_items, len(data[t])) for t in tasks)
    return Stage("item scoring", info.name, f"{n} items ({', '.join(tasks)})", run, merge(rec.gemms))


def train_stage(P, quick: bool) -> Stage:
    import bench_train

    shape = bench_train.default_shape() if not quick else dict(
        n_layer=2, n_head=2, n_embd=32, block_size=32, vocab_size=128, batch=2, mlp="gelu")
    v = bench_train.Variant("fp32-eager", shape, "baseline", bf16=P.train_bf16, compiled=False)
    v.warm(1)
    a = arch_of(v.model.config)
    name = f"gpt {shape['n_layer']}x{shape['n_embd']}"
    return Stage("training step", name, f"{shape['batch']} x {shape['block_size']} tokens, vocab {shape['vocab_size']}",
                 v.step, train_step_gemms(a, shape["batch"], shape["block_size"]), P.train_tokens // (
                     shape["batch"] * shape["block_size"]))


def model_stages(name: str, P, quick: bool, only: set[str]) -> list[Stage]:
    from residshift.core.models import load_model

    lm, tok, info = load_model(name)
    a = arch_of(lm._module.config)
    units = units_default(a, P)
    makers = {"lens": lambda: lens_stage(lm, info, a, P, quick),
              "tuned-lens step": lambda: tuned_stage(lm, info, a, P),
              "sweep cell": lambda: sweep_stage(lm, info, a, P),
              "gate-fit step": lambda: gate_stage(lm, info, a, P),
              "item scoring": lambda: item_stage(lm, info, tok, a, P, quick)}
    out = []
    for stage, make in makers.items():
        if stage in only:
            s = make()
            s.units_default = units[stage]
            out.append(s)
    return out


# --------------------------------------------------------------------------------------------
# Measuring
# --------------------------------------------------------------------------------------------


def load1() -> float:
    return round(os.getloadavg()[0], 2)


def time_call(run: Callable[[], Any], min_s: float) -> float:
    """Seconds of one call (repeated until ``min_s`` has passed; the mean)."""
    n, t0 = 0, time.perf_counter()
    while True:
        run()
        n += 1
        dt = time.perf_counter() - t0
        if dt >= min_s:
            return dt / n


def measure(stage: Stage, timer: GemmTimer, rounds: int, min_s: float) -> dict[str, Any]:
    """``rounds`` rounds of (the stage's bound, the stage), alternating which goes first."""
    bounds, times, loads = [], [], []
    for r in range(rounds):
        before = load1()
        if r % 2:
            times.append(time_call(stage.run, min_s))
            bounds.append(timer.bound(stage.gemms))
        else:
            bounds.append(timer.bound(stage.gemms))
            times.append(time_call(stage.run, min_s))
        loads.append([before, load1()])
    paired = statistics.median(t / b for t, b in zip(times, bounds))
    bound, best = timer.best_bound(stage.gemms), min(times)
    multiple = best / bound
    target = TARGETS.get(stage.name, DEFAULT_TARGET)
    flops = total_flops(stage.gemms)
    row = {"stage": stage.name, "model": stage.model, "unit": stage.unit, "flops": flops,
           "bound_s": round(bound, 5), "measured_s": round(best, 5),
           "multiple": round(multiple, 3), "target": target, "met": multiple <= target,
           "multiple_median_paired": round(paired, 3),
           "bound_gflops": round(flops / bound / 1e9, 2), "achieved_gflops": round(flops / best / 1e9, 2),
           "rounds": [{"bound_s": round(b, 5), "measured_s": round(t, 5), "load": ld}
                      for b, t, ld in zip(bounds, times, loads)],
           "gemms": [{"what": g.what, "shape": list(g.shape), "count": g.count} for g in merge(stage.gemms)]}
    if stage.units_default:
        row["units_default"] = stage.units_default
        row["flops_default"] = flops * stage.units_default
        row["bound_default_s"] = round(row["bound_s"] * stage.units_default, 1)
    print(f"[bench_bounds] {stage.name:<16} {stage.model:<14} x{multiple:.2f} of its bound "
          f"({row['measured_s']:.4g} s vs {row['bound_s']:.4g} s; load {loads[0][0]}-{loads[-1][1]})", flush=True)
    return row


def table(rows: list[dict]) -> str:
    head = f"{'stage':<16} {'model':<14} {'GFLOP':>9} {'bound s':>9} {'measured s':>10} {'x bound':>8} {'target':>6}  met"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['stage']:<16} {r['model']:<14} {r['flops'] / 1e9:>9.3f} {r['bound_s']:>9.4f} "
                     f"{r['measured_s']:>10.4f} {r['multiple']:>8.2f} {r['target']:>6.1f}  "
                     f"{'met' if r['met'] else 'MISSED'}")
    return "\n".join(lines)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="smollm2-135m", help="comma-separated embedded models")
    ap.add_argument("--stages", default=",".join(STAGES), help=f"comma-separated, of: {', '.join(STAGES)}")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--min-s", type=float, default=1.0, help="time each stage for at least this long per round")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's, = the cores)")
    ap.add_argument("--quick", action="store_true", help="tiny in-process models and sizes (a test run: seconds)")
    ap.add_argument("--json", default=None, help="write the numbers here (atomically)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    only = set(s.strip() for s in args.stages.split(","))
    unknown = only - set(STAGES)
    if unknown:
        raise SystemExit(f"unknown stages {sorted(unknown)}: use some of {', '.join(STAGES)}")
    P = profiles.resolve("smoke" if args.quick else "default")
    models = ["tiny-llama"] if args.quick else [m.strip() for m in args.models.split(",")]
    min_s = 0.02 if args.quick else args.min_s
    timer = GemmTimer(min_s=0.005 if args.quick else 0.05, repeats=2 if args.quick else 3)
    out: dict[str, Any] = {
        "benchmark": "stage time as a multiple of its fp32 GEMM bound (issue 37)",
        "machine": {**cpu_facts(), "cpu_count": os.cpu_count(), "torch": torch.__version__,
                    "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
                    "mkl_cbwr": os.environ.get("MKL_CBWR")},
        "profile": P.profile, "quick": args.quick, "rounds": args.rounds,
        "note": ("the cores are shared with other processes: the 1-minute load average is recorded "
                 "around every round; bound and stage alternate within each round"),
        "load_at_start": load1(), "targets": {**TARGETS, "other stages": DEFAULT_TARGET}, "stages": []}
    t0 = time.perf_counter()
    rows = []
    for name in models:
        for stage in model_stages(name, P, args.quick, only):
            rows.append(measure(stage, timer, args.rounds, min_s))
    if "training step" in only:
        rows.append(measure(train_stage(P, args.quick), timer, args.rounds, min_s))
    out["stages"] = rows
    out["gemm_rates"] = timer.rates()
    out["load_at_end"] = load1()
    out["seconds"] = round(time.perf_counter() - t0, 1)
    text = table(rows)
    print(text)
    print(f"{out['machine']['cpu']}, {out['machine']['threads']} threads; load {out['load_at_start']} -> "
          f"{out['load_at_end']} (shared cores)")
    if args.json:
        from residshift.core.cache import atomic_write_text

        atomic_write_text(Path(args.json), json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    main()
