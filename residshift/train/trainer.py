"""Train a small GPT (``residshift.core.models.gpt``) with the residual attenuation in place.

>>> cfg = profiles.stage(TrainConfig, "default", mode="fixed", alpha=0.0, alpha_layers=[3], seed=1)
>>> run = train(cfg)                          # results/train/<label>-<key>/ ; reused when finished
>>> summary = read_summary(run)               # final / best validation loss, tokens/s, ...
>>> loaded = load_model(run / "model")        # residshift.core.models.load_model: lens, harness, nnsight

Command line: ``python -m residshift train --profile default --mode fixed --alpha 0 --layer 3 --seed 1``
(``-p key=value`` sets any :class:`TrainConfig` field); several processes or GPUs:
``torchrun --nproc_per_node 8 -m residshift train --profile paper ...``.

The loop is ``residshift.core.fitting.fit`` (AdamW, fused where torch has it; linear warm-up and
cosine decay to ``min_lr_ratio · lr``; accumulation; clipping at ``grad_clip``; held-out evaluation
every ``eval_every`` steps; atomic checkpoints; the JSON-lines log; a progress bar with the loss and
tokens/s). What this module adds:

- **Run directories.** One per configuration: ``results_dir()/train/<mode>-s<seed>-<key>/`` with
  ``<key>`` the hash of the (device-resolved) configuration. It holds ``config.json``,
  ``checkpoint.pt`` and its sha256 ``checkpoint.pt.sha256`` while training (deleted once the model
  is saved; a damaged checkpoint is refused, naming the fix), ``log.jsonl`` (one record per
  step; one per evaluation with the validation loss and, for the learned modes, every ``alpha/<l>``
  or ``backout_lambda``), ``model/`` (``save_pretrained`` of the model and the tokenizer with a
  ``SHA256SUMS`` manifest, written to a temporary folder and renamed into place; checked whenever
  the run is reused) and ``summary.json`` (written last: its presence marks a finished run, which a
  rerun returns without training). While a process trains the run it holds
  ``train.lock`` (:func:`residshift.train.lock.run_lock`), so a second trainer of the same folder on
  the same host is refused with one line naming the holder (exit status 75); holding it, a starting run deletes the
  temporary files and folders a killed write left (:func:`sweep_debris`). A killed run resumes from
  its checkpoint and ends exactly where an uninterrupted run ends (tested, also across a real
  process kill).
- **Paired variants.** The batch of step ``s`` depends on ``(seed, s)`` only
  (:class:`residshift.train.data.TokenWindows`), and every variant of a seed starts from the SAME
  weights: the ``baseline`` model is built from ``torch.manual_seed(seed)`` and its state is loaded
  into the variant, whose own parameters (gates, scalars, the backout lambda) keep their
  deterministic initialisation. Dropout draws from ``fit``'s seeded generator. So two variants of one
  seed differ by their residual mode only.
- **Data.** A named corpus (WikiText-2 train / validation here) tokenized once and cached, or a
  ``datasets`` streaming corpus (``corpus`` a dict of ``load_dataset`` arguments; FineWeb-Edu
  sample-10BT in the ``paper`` profile) prepared into memory-mapped shards with the first
  ``val_tokens`` tokens held out for validation (``residshift.train.data.prepare_stream``). The
  validation windows are the same for every seed and variant.
- **Scale-out with torchrun + DistributedDataParallel.** Under ``torchrun`` (``WORLD_SIZE > 1``) each
  process joins the process group (NCCL on CUDA, gloo on CPU), reads its own slice of each step's
  batch (``batch_size`` is the batch of all processes together, so one process and W processes take
  the same steps), evaluates its share of the validation windows (summed across processes), and
  rank 0 alone writes the checkpoint, the log, the model and the summary. The world size is not
  part of the run key: a run may resume with another number of processes.
- **bf16 and torch.compile.** ``bf16=None`` / ``compile=None`` take the device's default in
  ``DEVICE_DEFAULTS``, chosen by measurement (``benchmarks/bench_train.py``, output committed as
  ``benchmarks/bench-train.json``): bf16 autocast only where it is faster (parameters, optimiser
  state and the loss stay fp32 either way), ``torch.compile`` only where it is faster by more than
  its one-off compile time is worth.
- **Loss.** Windows of ``context`` tokens (``[BOS] +`` corpus tokens where the tokenizer puts BOS
  first), scored by ``core.unembed.next_token_losses`` (``context - 1`` predictions per window), the
  same loss the harness reports: the summary's validation loss equals the harness's on the same
  windows (tested).

Measured on this machine (bench-train.json; a shared 2-core Intel Xeon "Ice Lake", AVX-512 but NO
AVX512-BF16 or AMX, so bf16 matrix products are emulated; load average about 8):

- CPU, 6 layers / width 384 / context 256 / vocabulary 8,192 / batch 8: eager fp32 399 tokens/s,
  bf16 autocast x0.32, fp32 compiled x1.04 (67 s to compile), bf16 compiled x0.35;
- CPU, the ``default`` size (6 / 128 / 128 / 1,024, batch 8): eager fp32 4,118 tokens/s, bf16
  x0.35, fp32 compiled x1.02 (59 s to compile), bf16 compiled x0.39.

So on CPU, when a configuration leaves ``bf16`` as None: bf16 only where the CPU has native bf16
(``avx512_bf16`` / ``amx_bf16`` in ``/proc/cpuinfo``; issue 9 measured 2.6x for bf16 + compile on
such a CPU at a wider shape), no compile (no gain here; a minute of compiling per run). The
profiles do not leave it to the machine: ``smoke`` and ``default`` fix fp32, because at their
small shape bf16 was slower even on CPUs with native bf16 (0.81x on an Intel Xeon with AMX,
``bench-train-xeon-amx.json``; 0.91x on an AMD EPYC), and the same profile must give the same runs
on any machine. CUDA: bf16 and compile (not measured in this session, which
had no GPU; the standard choice on Ampere and later, where bf16 tensor cores double the fp32-TF32
rate and compile fuses the small element-wise kernels).

DDP equals one process step for step (same global batch, averaged gradients) without dropout; with
dropout the masks of a rank's rows differ from those one process would draw (same seed, different
rows), so the curves agree in distribution only.
"""
from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import re
import shutil
import time
from dataclasses import asdict, dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from transformers.utils import logging as hf_logging

from ..core import profiles
from ..core.cache import (DamagedFileError, _canonical, _umask, atomic_dir, atomic_write_text, code_fingerprint,
                          check_folder, config_key, discard_verified, sweep_debris as sweep_writes, write_manifest)
from ..core.data import current_digest, tokenizer_fingerprint
from ..core.fitting import FORMAT, FitConfig, FitError, fit, read_checkpoint
from ..core.machine import cpu_facts, device_problem  # cpu_facts re-exported: every speed figure names its CPU
from ..core.paths import cache_dir, results_dir
from ..core.unembed import next_token_losses
from . import data as D
from ..core.models.gpt import GPT, GPTConfig, GPTConfigError
from .lock import run_lock
from .tokenizer import TokenizerSpecError, get_tokenizer, prepends_bos

# Chosen by measurement (benchmarks/bench_train.py); None in a TrainConfig means "this table".
DEVICE_DEFAULTS: dict[str, dict[str, bool]] = {
    "cpu": {"bf16": True, "compile": False},  # bf16 only with native bf16 (see _cpu_has_bf16)
    "cuda": {"bf16": True, "compile": True},
}

RUN_FILES = ("config.json", "checkpoint.pt", "checkpoint.pt.sha256", "log.jsonl", "model", "summary.json")
LOCKED_EXIT = 75  # `residshift train` exit status when another process trains the run (EX_TEMPFAIL)


class TrainError(ValueError):
    """A training run that cannot start as asked; the message names the fix."""


@dataclass(frozen=True)
class TrainConfig:
    """Everything that defines a training run (the run directory is keyed by it).

    Model (``residshift.core.models.gpt.GPTConfig``): ``layers``, ``heads``, ``width``, ``context``,
    ``vocab`` (None = the tokenizer's size; larger pads the embedding), ``mlp``, ``dropout``,
    ``bias``, the ``embedding`` recipe (``gpt.RECIPES``), the residual ``mode`` and its parameters (``alpha`` and ``alpha_layers`` for
    ``fixed``; ``site``; ``theta_init`` / ``scalar_init`` / ``backout_layer`` / ``backout_init``,
    None = the model's default). Data: ``tokenizer`` (a ``residshift.train.tokenizer`` spec),
    ``corpus`` (a named corpus or a dict of ``datasets.load_dataset`` arguments, streamed),
    ``split``, ``val_corpus`` / ``val_split`` (None = the first ``val_tokens`` tokens of a streamed
    corpus), ``eval_windows`` (validation windows per evaluation). Optimisation: ``tokens`` (the
    training budget: ``steps = ceil(tokens / tokens_per_step)``), ``batch_size`` (windows per
    micro-step, all processes together), ``accumulate``, ``micro_batch`` (windows per forward pass in
    one process, a divisor of its share ``batch_size // world``; ``"auto"``: the whole share on a CPU,
    on a GPU the largest divisor whose forward and backward fit, :func:`fit_micro_batch`; the same
    step either way, its gradients summed over the parts), ``lr``, ``betas``, ``weight_decay`` (2-D
    weights only), ``warmup`` (steps), ``min_lr_ratio`` (cosine floor), ``grad_clip``,
    ``eval_every`` and ``checkpoint_every`` (steps), ``seed``, ``bf16`` and ``compile`` (None = the
    device default, ``DEVICE_DEFAULTS``), ``gate_lr`` (None: the learned gates, scalars and backout
    lambda train at ``lr`` with the other parameters without decay; a number: in a group of their own
    at that peak learning rate, on the same schedule).
    """

    PREFIX: ClassVar[str] = "train"  # its profile keys (profiles.stage): train_layers, ..., train_batch

    layers: int = 6
    heads: int = 4
    width: int = 128
    context: int = 128
    vocab: int | None = None
    mlp: str = "gelu"
    embedding: str = "nanogpt"
    dropout: float = 0.0
    bias: bool = False
    mode: str = "baseline"
    alpha: float | None = None
    alpha_layers: tuple[int, ...] | None = None
    site: str = "block"
    theta_init: float | None = None
    scalar_init: float | None = None
    backout_layer: int | None = None
    backout_init: float | None = None
    tokenizer: str = "bpe:wikitext-2:1024"
    corpus: Any = "wikitext-2"
    split: str = "train"
    val_corpus: str | None = "wikitext-2"
    val_split: str = "validation"
    val_tokens: int = 1_000_000
    shard_tokens: int = 100_000_000
    tokens: int = 1_000_000
    batch_size: int = field(default=16, metadata=profiles.key("batch"))
    accumulate: int = 1
    micro_batch: int | str = "auto"
    lr: float = 2e-3
    betas: tuple[float, float] = (0.9, 0.95)
    weight_decay: float = 0.1
    warmup: int = 50
    min_lr_ratio: float = 0.1
    grad_clip: float | None = 1.0
    eval_every: int = 100
    eval_windows: int | None = 64
    seed: int = 0
    bf16: bool | None = None
    compile: bool | None = None
    checkpoint_every: int = 100
    gate_lr: float | None = None

    def __post_init__(self) -> None:
        if self.alpha_layers is not None:
            layers = [self.alpha_layers] if isinstance(self.alpha_layers, int) else self.alpha_layers
            object.__setattr__(self, "alpha_layers", tuple(int(l) for l in layers))
        object.__setattr__(self, "betas", tuple(float(b) for b in self.betas))
        if self.alpha is not None:
            object.__setattr__(self, "alpha", float(self.alpha))
        self.check()

    # -- construction --------------------------------------------------------------------------

    def with_(self, **changes: Any) -> "TrainConfig":
        return replace(self, **changes)

    # -- checks --------------------------------------------------------------------------------

    def check(self) -> "TrainConfig":
        def bad(msg: str):
            raise TrainError(msg)

        for name in ("tokens", "batch_size", "accumulate", "val_tokens", "shard_tokens"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                bad(f"{name} must be a positive integer, got {v!r}")
        for name in ("warmup", "eval_every", "checkpoint_every", "seed"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                bad(f"{name} must be an integer >= 0, got {v!r}")
        if self.micro_batch != "auto" and (not isinstance(self.micro_batch, int) or isinstance(self.micro_batch, bool)
                                           or self.micro_batch < 1):
            bad(f"micro_batch must be 'auto' or a positive integer, got {self.micro_batch!r}")
        if self.eval_windows is not None and (not isinstance(self.eval_windows, int) or self.eval_windows < 1):
            bad(f"eval_windows must be None (all) or a positive integer, got {self.eval_windows!r}")
        if not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and self.lr > 0):
            bad(f"lr must be a positive finite number, got {self.lr!r}")
        if self.gate_lr is not None and not (isinstance(self.gate_lr, (int, float)) and math.isfinite(self.gate_lr)
                                             and self.gate_lr > 0):
            bad(f"gate_lr must be None (the gates train at lr) or a positive number, got {self.gate_lr!r}")
        if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            bad(f"betas must be two numbers in [0, 1), got {self.betas}")
        if not 0 <= self.weight_decay < 1:
            bad(f"weight_decay must lie in [0, 1), got {self.weight_decay}")
        if self.grad_clip is not None and not self.grad_clip > 0:
            bad(f"grad_clip must be None (no clipping) or > 0, got {self.grad_clip}")
        if isinstance(self.corpus, dict):
            try:
                D.check_stream_spec(self.corpus)
            except D.DataError as err:
                bad(str(err))
        elif not isinstance(self.corpus, str):
            bad(f"corpus must be a corpus name or a dict of datasets.load_dataset arguments, got {self.corpus!r}")
        if self.val_corpus is None and not isinstance(self.corpus, dict):
            bad("val_corpus=None (hold out the head of the training stream) needs a streamed corpus; name a "
                "validation corpus, e.g. val_corpus='wikitext-2', val_split='validation'")
        if self.alpha is not None and not math.isfinite(self.alpha):
            bad(f"alpha must be a number in [0, 1], got {self.alpha}")
        if self.mode != "fixed" and (self.alpha is not None or self.alpha_layers is not None):
            bad(f"alpha / alpha_layers (--alpha / --layer) only apply to mode 'fixed', not {self.mode!r}: "
                "drop them or use --mode fixed")
        self.model_config(self.vocab or 2 ** 16)  # the model's own checks (mode, alpha in [0, 1], layers)
        return self

    # -- derived -------------------------------------------------------------------------------

    def model_config(self, vocab: int, tokenizer=None, *, mode: str | None = None):
        """The ``GPTConfig`` (``mode`` overrides the residual mode: the shared-init baseline)."""
        mode = self.mode if mode is None else mode
        kw: dict[str, Any] = dict(n_layer=self.layers, n_head=self.heads, n_embd=self.width,
                                  block_size=self.context, vocab_size=vocab, mlp=self.mlp, embedding=self.embedding,
                                  dropout=self.dropout, bias=self.bias, residual=mode)
        if mode == self.mode:
            kw["site"] = self.site
            if mode == "fixed":
                kw.update(alpha=self.alpha, alpha_layers=list(self.alpha_layers) if self.alpha_layers else None)
            for name in ("theta_init", "scalar_init", "backout_init"):
                if getattr(self, name) is not None:
                    kw[name] = getattr(self, name)
            if self.backout_layer is not None:
                kw["backout_layer"] = self.backout_layer
        if tokenizer is not None:
            kw.update(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                      pad_token_id=tokenizer.pad_token_id)
        try:
            return GPTConfig(**kw)
        except (GPTConfigError, TypeError, ValueError) as err:
            raise TrainError(str(err)) from err

    def resolved(self, device: str) -> "TrainConfig":
        """``bf16`` / ``compile`` None replaced by the device's measured default."""
        kind = torch.device(device).type
        table = DEVICE_DEFAULTS.get(kind, {"bf16": False, "compile": False})
        bf16 = table["bf16"] if self.bf16 is None else self.bf16
        if bf16 and kind == "cpu" and not _cpu_has_bf16():
            bf16 = False if self.bf16 is None else bf16
        return replace(self, bf16=bf16, compile=table["compile"] if self.compile is None else self.compile)

    def key(self, tokenizer) -> str:
        """The run key: this configuration, the tokenizer's vocabulary and rules, the sha256 of the named
        corpus files it trains and validates on (``data.current_digest``: a damaged or replaced file is
        another run) and the code that trains (:func:`training_code_fingerprint`)."""
        named = [(c, s) for c, s in ((self.corpus, self.split), (self.val_corpus, self.val_split)) if isinstance(c, str)]
        corpora = {f"{c}/{s}": current_digest(f"{c}/{s}") for c, s in named}
        return config_key({"kind": "residshift-train/1", "config": asdict(self), "corpora": corpora,
                           "tokenizer": tokenizer_fingerprint(tokenizer), "code": training_code_fingerprint()})

    def label(self) -> str:
        tag = self.mode
        if self.mode == "fixed":
            tag += f"-a{self.alpha:g}-l{'.'.join(str(l) for l in self.alpha_layers)}"
        return f"{tag}-s{self.seed}"

    def gate_lr_scale(self) -> float | None:
        """The learned gates' learning rate relative to ``lr`` (None: no group of their own)."""
        return None if self.gate_lr is None else self.gate_lr / self.lr

    def tokens_per_step(self) -> int:
        return self.batch_size * self.accumulate * self.context

    def steps(self) -> int:
        return max(1, math.ceil(self.tokens / self.tokens_per_step()))

    def fit_config(self) -> FitConfig:
        return FitConfig(steps=self.steps(), lr=self.lr, optimizer="adamw", betas=self.betas,
                         weight_decay=self.weight_decay, warmup=self.warmup, schedule="cosine",
                         min_lr_ratio=self.min_lr_ratio, grad_clip=self.grad_clip, accumulate=self.accumulate,
                         eval_every=self.eval_every, keep_best=False, checkpoint_every=self.checkpoint_every,
                         seed=self.seed)


# The code a run depends on, declared: this module and every residshift module it imports (the model,
# the data, the loop, the loss, the device defaults), except the tokenizer module, whose product enters
# the run key by its own fingerprint (data.tokenizer_fingerprint), so the loaders behind pretrained
# tokenizers (and so the lens command, notebooks 00-05) can change without retraining anything.
RUN_CODE_WITHOUT = ("residshift.train.tokenizer",)


def training_code_fingerprint() -> str:
    """The fingerprint of the code a trained model depends on (:data:`RUN_CODE_WITHOUT` says what is
    left out and why). A change to it trains again rather than reusing a run another code produced."""
    return code_fingerprint(__name__, without=RUN_CODE_WITHOUT)


def _cpu_has_bf16() -> bool:
    return bool(cpu_facts()["native_bf16"])


# --------------------------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------------------------


@dataclass
class Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    started_here: bool = False

    @property
    def main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.world > 1:
            torch.distributed.barrier()

    def all_sum(self, t: torch.Tensor) -> torch.Tensor:
        if self.world > 1:
            torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.SUM)
        return t


def _dist(device: str) -> Dist:
    """Join torchrun's process group when ``WORLD_SIZE > 1`` (NCCL on CUDA, gloo on CPU)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Dist()
    started = False
    if not dist.is_initialized():
        backend = "nccl" if torch.device(device).type == "cuda" else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))  # one GPU per process
        # long timeout: rank 0 may be tokenizing a corpus while the others wait at a barrier
        dist.init_process_group(backend, timeout=timedelta(minutes=int(os.environ.get("RESIDSHIFT_DIST_TIMEOUT_MIN", "120"))))
        started = True
    return Dist(rank=dist.get_rank(), world=dist.get_world_size(),
                local_rank=int(os.environ.get("LOCAL_RANK", "0")), started_here=started)


def _device(device: str | None, ddp: Dist | None = None) -> str:
    if device in (None, "auto"):
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and ddp is not None and ddp.world > 1:
        device = f"cuda:{ddp.local_rank}"
    why = device_problem(device)
    if why is not None:
        raise TrainError(f"device {device!r} {why}")
    return device


# --------------------------------------------------------------------------------------------
# Pieces
# --------------------------------------------------------------------------------------------


def load_tokenizer(cfg: TrainConfig):
    """The tokenizer of ``cfg`` (loaded once per process and cache folder: a grid of runs shares it)."""
    return _tokenizer(cfg.tokenizer, str(cache_dir()))


@functools.lru_cache(maxsize=8)
def _tokenizer(spec: str, cache: str):
    try:
        return get_tokenizer(spec)
    except TokenizerSpecError as err:
        raise TrainError(f"tokenizer {spec!r}: {err}") from err


def vocab_size(cfg: TrainConfig, tokenizer) -> int:
    n = len(tokenizer)
    if cfg.vocab is None:
        return n
    if cfg.vocab < n:
        raise TrainError(f"vocab={cfg.vocab} is smaller than the tokenizer {cfg.tokenizer!r} ({n} tokens): set "
                         f"vocab to at least {n}, or None for the tokenizer's size")
    return cfg.vocab


def bos_id(tokenizer) -> int | None:
    return tokenizer.bos_token_id if prepends_bos(tokenizer) else None


def init_model(cfg: TrainConfig, vocab: int, tokenizer=None):
    """The model of ``cfg`` with the shared weights of its seed (see the module docstring)."""
    torch.manual_seed(cfg.seed)
    base = GPT(cfg.model_config(vocab, tokenizer, mode="baseline"))
    if cfg.mode == "baseline":
        return base
    torch.manual_seed(cfg.seed)
    model = GPT(cfg.model_config(vocab, tokenizer))
    missing, unexpected = model.load_state_dict(base.state_dict(), strict=False)
    own = {n for n, p in model.named_parameters() if any(p is q for q in model.gate_parameters())}
    if unexpected or set(missing) - own:
        raise TrainError(f"mode {cfg.mode!r} does not share the baseline's weights (missing "
                         f"{sorted(set(missing) - own)}, unexpected {unexpected}); this is a bug in gpt.py")
    return model


@dataclass
class Data:
    train: D.TokenWindows
    val: torch.Tensor  # [n, context] fixed validation windows
    unigram_train: Any  # tokens the unigram baseline is counted on
    source: dict[str, Any] = field(default_factory=dict)


def load_data(cfg: TrainConfig, tokenizer, *, progress: bool = False) -> Data:
    bos = bos_id(tokenizer)
    if isinstance(cfg.corpus, dict):
        stream = D.prepare_stream(cfg.corpus, tokenizer, train_tokens=cfg.tokens, val_tokens=cfg.val_tokens,
                                  window=cfg.context - (bos is not None), shard_tokens=cfg.shard_tokens,
                                  progress=progress)
        shards = stream.train_shards
        train = D.TokenWindows(shards, cfg.context, bos)
        val_tokens = stream.val if cfg.val_corpus is None else D.named_corpus_tokens(cfg.val_corpus, cfg.val_split,
                                                                                    tokenizer)
        source = {"stream": str(stream.folder), "train_tokens": stream.train_tokens,
                  "unigram_counted_on": "first training shard"}
        unigram = shards[0]
    else:
        tokens = D.named_corpus_tokens(cfg.corpus, cfg.split, tokenizer)
        train = D.TokenWindows([tokens], cfg.context, bos)
        val_tokens = D.named_corpus_tokens(cfg.val_corpus, cfg.val_split, tokenizer)
        source = {"train_tokens": int(len(tokens)), "unigram_counted_on": f"{cfg.corpus} {cfg.split}"}
        unigram = tokens
    val = D.eval_windows(val_tokens, cfg.context, cfg.eval_windows, bos)
    return Data(train=train, val=val, unigram_train=unigram, source=source)


def fit_micro_batch(cfg: TrainConfig, model, share: int, vocab: int, device: str) -> int:
    """Windows per forward pass for a process whose share of a micro-step is ``share``.

    A number in ``cfg.micro_batch`` must divide ``share``. ``"auto"``: ``share`` on a CPU (the step as
    one pass); on a GPU the largest divisor of ``share`` for which one forward and backward of random
    windows at the run's context and precision fits the device, tried from ``share`` down, halving on
    an out-of-memory error (the paper profile's share of 256 windows x 1,024 tokens does not fit one
    GPU at once). The parts of a micro-step sum to its gradient, so the step is the same up to
    floating-point order (tested on CPU)."""
    if cfg.micro_batch != "auto":
        if share % cfg.micro_batch:
            raise TrainError(f"micro_batch {cfg.micro_batch} must divide the windows each process takes per "
                             f"micro-step ({share} = batch_size {cfg.batch_size} // processes): pick a divisor "
                             "or 'auto'")
        return cfg.micro_batch
    if torch.device(device).type != "cuda":
        return share
    sizes = [d for d in range(share, 0, -1) if share % d == 0]
    size = share
    while True:
        try:
            x = torch.randint(vocab, (size, cfg.context), device=device)
            with _autocast(device, cfg.bf16):
                logits = model(x).logits
            next_token_losses(logits, x).mean().backward()
            return size
        except torch.cuda.OutOfMemoryError:
            smaller = [d for d in sizes if d <= size // 2]
            if not smaller:
                raise TrainError(f"one window of {cfg.context} tokens does not fit {device} for a forward and "
                                 "backward: shorten the context or use a device with more memory") from None
            size = smaller[0]
        finally:
            model.zero_grad(set_to_none=True)
            logits = x = None
            torch.cuda.empty_cache()


def _autocast(device: str, enabled: bool):
    if not enabled:
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=torch.bfloat16)


def check_checkpoint(path: Path, vocab: int) -> None:
    """Refuse a checkpoint without its digest file, a damaged one (its sha256 differs from the one
    written with it, or it cannot be read: ``fitting.read_checkpoint``) or one whose vocabulary
    differs, naming the fix."""
    if not path.is_file():
        return
    try:
        saved = read_checkpoint(path, restart="start the run over")
    except FitError as err:
        raise TrainError(str(err)) from err
    if not isinstance(saved, dict) or saved.get("format") != FORMAT or "module" not in saved:
        raise TrainError(f"{path} is not a residshift training checkpoint; delete it to start the run over")
    emb = saved["module"].get("transformer.wte.weight")
    if emb is None:
        raise TrainError(f"{path} holds no GPT embedding (transformer.wte.weight); delete it to start over")
    if emb.shape[0] != vocab:
        raise TrainError(f"checkpoint {path} has a vocabulary of {emb.shape[0]} tokens but this run's is {vocab} "
                         "(another tokenizer or vocab setting): use the tokenizer / vocab it was trained with, "
                         "or delete the checkpoint to start over")


def run_dir_for(cfg: TrainConfig, device: str | None = None, tokenizer=None) -> Path:
    """Where ``train(cfg)`` keeps its run (the key uses the device-resolved bf16 / compile and the
    tokenizer, which is loaded, or trained and cached, when not given)."""
    c = cfg.resolved(_device(device))
    return results_dir() / "train" / f"{c.label()}-{c.key(tokenizer or load_tokenizer(c))}"


def read_summary(run: str | Path) -> dict[str, Any]:
    path = Path(run) / "summary.json"
    if not path.is_file():
        raise TrainError(f"{run} holds no finished run (no summary.json): run train() to finish it")
    return json.loads(path.read_text())


def read_log(run: str | Path) -> list[dict[str, Any]]:
    """The JSON-lines log of a run (steps and evaluations)."""
    path = Path(run) / "log.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _save_model(model, tokenizer, target: Path) -> None:
    """``save_pretrained`` into a temporary folder beside ``target``, with a ``SHA256SUMS``
    manifest of its files (``cache.write_manifest``; checked when the run is reused), then rename
    it into place. Its files get the umask's mode (safetensors writes ``model.safetensors`` 0600)."""
    bars = hf_logging.is_progress_bar_enabled()
    try:
        hf_logging.disable_progress_bar()  # no "Writing model shards" bar per run
        with atomic_dir(target) as tmp:
            model.save_pretrained(str(tmp))
            tokenizer.save_pretrained(str(tmp))
            _usual_modes(tmp)
            write_manifest(tmp)
    finally:
        if bars:
            hf_logging.enable_progress_bar()


def _usual_modes(folder: Path) -> None:
    """Give every file under ``folder`` the mode any new file gets (``0666`` less the umask)."""
    mode = 0o666 & ~_umask()
    for path in Path(folder).rglob("*"):
        if path.is_file() and not path.is_symlink():
            os.chmod(path, mode)


# The temporary names of a run's files written by versions before the names carried their writer:
# cache.atomic_path's ``.<file>.XXXXXXXX.tmp`` (mkstemp's 8 characters), atomic_dir's ``.model.XXXXXXXX``.
_OLD_DEBRIS = re.compile(r"\.(?:%s)\.[a-z0-9_]{8}\.tmp|\.model\.[0-9a-f]{8}"
                         % "|".join(re.escape(name) for name in RUN_FILES if name != "model"))


def sweep_debris(run: Path) -> list[str]:
    """Delete what killed writes left in ``run`` (a checkpoint's temporary file is a whole checkpoint):
    ``cache.sweep_debris`` (temporary files and folders whose writer is gone) and the older temporary
    names of the run's own files (:data:`_OLD_DEBRIS`), nothing else; the names removed. Call it
    holding the run's lock: then nothing live writes them."""
    removed = [p.name for p in sweep_writes(run)]
    for path in sorted(Path(run).iterdir()):
        if not _OLD_DEBRIS.fullmatch(path.name):
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        removed.append(path.name)
    return removed


# --------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------


def train(cfg: TrainConfig, out_dir: str | Path | None = None, *, device: str | None = None,
          stop_after: int | None = None, progress: bool = True, prepare_only: bool = False) -> Path:
    """Train ``cfg`` (or return its finished run) and return the run directory.

    ``out_dir``: the run directory (default :func:`run_dir_for`). ``device``: "cpu", "cuda" or None
    (CUDA when available). ``stop_after``: end this call after that many optimiser steps, as an
    interruption would (a later call resumes). ``prepare_only``: build the tokenizer and the token
    streams, then stop (the slow single-process part of a multi-GPU run: run it once before
    ``torchrun``).
    """
    t_start = time.perf_counter()
    if not isinstance(cfg, TrainConfig):
        raise TrainError(f"train() takes a TrainConfig, got {type(cfg).__name__}")
    if stop_after is not None and (isinstance(stop_after, bool) or not isinstance(stop_after, int) or stop_after < 1):
        raise TrainError(f"stop_after (--stop-after) must be a positive number of steps, got {stop_after!r}; "
                         "leave it out to train to the end")
    if out_dir is not None and Path(out_dir).expanduser().exists() and not Path(out_dir).expanduser().is_dir():
        raise TrainError(f"out_dir (--out) {out_dir} is a file: give the path of a run folder (it is created)")
    ddp = _dist(_device(device))
    try:
        return _train(cfg, out_dir, device=_device(device, ddp), ddp=ddp, stop_after=stop_after,
                      progress=progress, prepare_only=prepare_only, t_start=t_start)
    finally:
        if ddp.started_here:
            torch.distributed.destroy_process_group()


def _rank0_first(ddp: Dist, fn):
    """``fn()`` on each node's first process, then on the others (which then read its caches)."""
    if ddp.local_rank != 0:
        ddp.barrier()
    out = fn()
    if ddp.local_rank == 0:
        ddp.barrier()
    return out


def _train(cfg: TrainConfig, out_dir, *, device: str, ddp: Dist, stop_after, progress, prepare_only,
           t_start) -> Path:
    cfg = cfg.resolved(device)
    tokenizer = _rank0_first(ddp, lambda: load_tokenizer(cfg))
    vocab = vocab_size(cfg, tokenizer)
    key = cfg.key(tokenizer)
    run = Path(out_dir) if out_dir is not None else results_dir() / "train" / f"{cfg.label()}-{key}"
    if _finished(run, key):
        return run  # finished: nothing is trained twice
    if prepare_only:  # the shared tokenizer and token caches only: the run folder is not touched
        check_checkpoint(run / "checkpoint.pt", vocab)
        _check_run_config(run, key)
        _rank0_first(ddp, lambda: load_data(cfg, tokenizer, progress=progress and ddp.main))
        return run
    with run_lock(run) if ddp.main else contextlib.nullcontext():  # one trainer per run folder
        if _finished(run, key):  # another process finished it between the check above and the lock
            return run
        return _train_locked(cfg, run, key, tokenizer, vocab, device=device, ddp=ddp, stop_after=stop_after,
                             progress=progress, t_start=t_start)


def _finished(run: Path, key: str) -> bool:
    """Whether ``run`` holds a finished run of ``key``, its model checked (:func:`check_model`)."""
    if (run / "summary.json").is_file() and (run / "model" / "config.json").is_file():
        _check_run_config(run, key)
        check_model(run / "model")
        return True
    return False


def check_model(folder: Path) -> None:
    """Check a trained model folder against its ``SHA256SUMS`` manifest; refuse a damaged one with
    a TrainError naming the file and the fix. A folder from an older version without a manifest
    is adopted (its manifest is written, unless the folder is read-only), so later damage is found."""
    try:
        check_folder(folder)
    except DamagedFileError as err:
        run = Path(folder).parent
        raise TrainError(f"the trained model of {run} is damaged: {err}; delete {run} to train the run "
                         "again") from err


def _train_locked(cfg: TrainConfig, run: Path, key: str, tokenizer, vocab: int, *, device: str, ddp: Dist,
                  stop_after, progress, t_start) -> Path:
    if ddp.main:  # under the run's lock: nothing live writes these
        sweep_debris(run)
    check_checkpoint(run / "checkpoint.pt", vocab)
    _check_run_config(run, key)
    data = _rank0_first(ddp, lambda: load_data(cfg, tokenizer, progress=progress and ddp.main))

    t_model = time.perf_counter()
    model = init_model(cfg, vocab, tokenizer).to(device)
    model.train()
    micro_size = fit_micro_batch(cfg, model, cfg.batch_size // ddp.world, vocab, device)  # before any write
    if ddp.main:
        run.mkdir(parents=True, exist_ok=True)
        atomic_write_text(run / "config.json", json.dumps(
            {"key": key, "label": cfg.label(), "config": _canonical(asdict(cfg))}, indent=2))
    forward = model
    no_sync = None
    if ddp.world > 1:
        forward = DDP(model, device_ids=[torch.device(device).index] if torch.device(device).type == "cuda" else None)
        no_sync = forward.no_sync
    if cfg.compile:
        forward = torch.compile(forward)
    if torch.device(device).type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    def step_fn(step: int, micro: int, backward) -> torch.Tensor:
        x = data.train.batch(step, micro, batch_size=cfg.batch_size, accumulate=cfg.accumulate, seed=cfg.seed,
                             rank=ddp.rank, world=ddp.world).to(device, non_blocking=True)
        parts = x.split(micro_size)
        loss = torch.zeros((), device=device)
        for j, part in enumerate(parts):  # one part unless the share does not fit the device at once
            with no_sync() if no_sync is not None and j < len(parts) - 1 else contextlib.nullcontext():
                with _autocast(device, cfg.bf16):
                    logits = forward(part).logits
                part_loss = next_token_losses(logits, part).mean()
                if len(parts) > 1:  # each part's share of the micro-step's mean
                    part_loss = part_loss * (len(part) / len(x))
                backward(part_loss)
            loss += part_loss.detach()
        if ddp.world > 1:  # the logged loss is the whole batch's (rank 0 writes the log)
            loss = ddp.all_sum(loss.clone()) / ddp.world
        return loss

    val = data.val
    mine = val[ddp.rank::ddp.world]  # this process's share of the validation windows
    eval_batch = micro_size

    def eval_fn() -> float:
        model.eval()
        total = torch.zeros(2, dtype=torch.float64, device=device)
        for i in range(0, len(mine), eval_batch):
            x = mine[i:i + eval_batch].to(device)
            with _autocast(device, cfg.bf16):
                logits = model(x).logits
            ce = next_token_losses(logits, x)
            total[0] += ce.sum().double()
            total[1] += ce.numel()
        model.train()
        ddp.all_sum(total)
        return float(total[0] / total[1])

    tps = cfg.tokens_per_step()
    try:
        result = fit(model, cfg.fit_config(), step_fn=step_fn, eval_fn=eval_fn,
                     param_groups=model.param_groups(cfg.weight_decay, cfg.gate_lr_scale()),
                     checkpoint=run / "checkpoint.pt",
                     log_path=run / "log.jsonl", tokens_per_step=tps, stop_after=stop_after,
                     progress=(cfg.label() if progress else False), no_sync=no_sync, is_main=ddp.main,
                     eval_extra=model.learned_scalars)
    except FitError as err:
        raise TrainError(str(err)) from err
    if result.finished and ddp.main:
        _finish(cfg, run, key, model, tokenizer, data, result, vocab=vocab, device=device, world=ddp.world,
                t_start=t_start, t_model=t_model, micro_size=micro_size)
    ddp.barrier()
    return run


def _check_run_config(run: Path, key: str) -> None:
    """The run folder's ``config.json`` (when there is one) must be this configuration's; a garbled
    one is a TrainError naming the file and the fix, not a JSONDecodeError."""
    if (run / "config.json").is_file():
        try:
            saved = json.loads((run / "config.json").read_text())
            if not isinstance(saved, dict):
                raise ValueError("not a JSON object")
        except ValueError as err:  # JSONDecodeError is a ValueError
            where = f" (line {err.lineno})" if isinstance(err, json.JSONDecodeError) else f" ({err})"
            raise TrainError(f"{run / 'config.json'} is not valid JSON{where}: delete that run folder, or choose "
                             "another out_dir, and train again") from None
        if saved.get("key") != key:
            raise TrainError(f"{run} holds a run of another configuration or code ({saved.get('label')}, key "
                             f"{saved.get('key')}, this run's {key}); choose another out_dir or delete that one")


def _finish(cfg: TrainConfig, run: Path, key: str, model, tokenizer, data: Data, result, *, vocab: int,
            device: str, world: int, t_start: float, t_model: float, micro_size: int) -> None:
    """Save the model and the tokenizer (atomically), then the summary (marks the run finished)."""
    evals = result.evals
    losses = result.train_loss
    tail = losses[-max(1, len(losses) // 20):]
    unigram = D.unigram_cross_entropy(data.unigram_train, data.val[:, 1:], vocab)
    tps = cfg.tokens_per_step()
    summary = {
        "key": key, "label": cfg.label(), "config": _canonical(asdict(cfg)),
        "model": {"parameters": model.num_params(non_embedding=False),
                  "non_embedding_parameters": model.num_params(), "vocab": vocab},
        "steps": result.steps, "tokens_per_step": tps, "tokens": result.steps * tps,
        "epochs": data.train.epochs(result.steps * cfg.batch_size * cfg.accumulate),
        "val_loss": evals[-1][1], "best_val_loss": result.best, "best_step": result.best_step,
        "unigram_ce": unigram, "below_unigram": unigram - evals[-1][1],
        "train_loss_tail": sum(tail) / len(tail),
        "train_seconds": result.seconds, "tokens_per_s": result.steps * tps / result.seconds,
        "wall_seconds_last_call": time.perf_counter() - t_start,
        # from building the model to here (steps, evaluations, checkpoints; not the tokenizer and the
        # token caches, which the runs of a grid share): what one more run costs
        "run_seconds_last_call": time.perf_counter() - t_model,
        "learned": model.learned_scalars(), "device": device, "world_size": world, "micro_batch": micro_size,
        "tf32": torch.device(device).type == "cuda" and torch.backends.cuda.matmul.allow_tf32,
        "torch": torch.__version__, "data": {**data.source, "val_windows": int(len(data.val))},
    }
    _save_model(model, tokenizer, run / "model")
    atomic_write_text(run / "summary.json", json.dumps(summary, indent=2))
    discard_verified(run / "checkpoint.pt")  # and its digest file
