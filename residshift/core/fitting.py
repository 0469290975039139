"""The one fitting loop: gates, the tuned lens and the trainer all optimise through :func:`fit`.

What it does, per optimiser step ``s = 0, 1, ...`` (at most ``cfg.steps``):

1. ``lr`` from the schedule (:func:`lr_at`: linear warm-up, then constant or cosine to
   ``min_lr_ratio · lr``), set on every parameter group;
2. ``cfg.accumulate`` micro-steps: ``step_fn(s, micro, backward)`` picks its batch from ``(s, micro)``
   (so a resumed run sees the same data), runs the forward and calls ``backward(loss)``, which
   scales by ``1 / accumulate`` and back-propagates. The callback style lets nnsight users call
   ``backward`` inside their trace;
3. gradient clipping (``cfg.grad_clip``), the optimiser step;
4. every ``cfg.eval_every`` steps (and after the last): ``eval_fn()`` on held-out data (lower is
   better). The best state of ``module`` is kept; after ``cfg.patience`` evaluations without an
   improvement of at least ``cfg.min_delta`` the fit stops early. ``eval_fn`` may return one number
   or one per part (the tuned lens: one per layer); then each part keeps its own best state
   (``best_keys(i)`` names the state-dict entries of part ``i``) and patience counts evaluations in
   which no part improved;
5. an atomic checkpoint (module, optimiser, RNG state, history) every ``cfg.checkpoint_every``
   steps, at every evaluation and at the end, with its sha256 beside it (``<path>.sha256``,
   ``cache.save_verified``); a checkpoint without its digest file, whose bytes changed or that
   cannot be read is refused with a FitError naming the file and the fix (:func:`read_checkpoint`).
   A fit started again with the same checkpoint path resumes where the last checkpoint left off and
   ends exactly where an uninterrupted fit ends (tested); a checkpoint made for another
   configuration is refused.

It also writes a JSON-lines log (one record per step: loss, lr, tokens/s, grad norm; one per
evaluation) and shows a progress bar with the loss and tokens/s. ``stop_after`` ends a call after
that many steps, as an interruption would (tests use it).

:func:`fit` itself is a short loop over named pieces: ``_start_or_resume`` (a fresh, seeded start or
the checkpoint's), ``_train_step`` (items 1-3: ``lr_at``, ``_micro_steps``, ``_clip``, the update),
``_evaluate`` (item 4: ``_update_best``, ``_out_of_patience``), ``_Checkpoint`` (item 5), ``_Log``
and ``_progress_bar`` (the log and the bar) and ``_result`` (the best state, the report).

>>> cfg = FitConfig(steps=200, lr=0.1, eval_every=10, patience=3)
>>> result = fit(gates, cfg, step_fn=step, eval_fn=heldout_loss, checkpoint=path)
>>> result.best, result.best_step, result.stopped_early
"""
from __future__ import annotations

import contextlib
import functools
import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, ContextManager, Iterable, Sequence

import torch
from torch import nn
from tqdm.auto import tqdm

from .cache import DamagedFileError, atomic_write_text, load_verified, save_verified

FORMAT = "residshift-fit/1"
OPTIMIZERS = ("adam", "adamw")
SCHEDULES = ("constant", "cosine")


class FitError(RuntimeError):
    """A fit that cannot run as asked; the message names the fix."""


@dataclass(frozen=True)
class FitConfig:
    """How to optimise (what to optimise is the caller's ``module`` and ``step_fn``)."""

    steps: int  # at most this many optimiser steps
    lr: float
    optimizer: str = "adam"  # "adam" | "adamw"
    betas: tuple[float, float] = (0.9, 0.999)
    weight_decay: float = 0.0  # applies to groups that do not set their own
    warmup: int = 0  # linear warm-up steps
    schedule: str = "constant"  # after warm-up: "constant" or "cosine" down to min_lr_ratio * lr
    min_lr_ratio: float = 0.1
    grad_clip: float | None = None  # max global grad norm; None = no clipping
    accumulate: int = 1  # micro-steps per optimiser step
    eval_every: int = 0  # held-out evaluation period in steps; 0 = only at the end
    eval_at_start: bool = False  # evaluate before the first step (the start is a candidate best)
    patience: int | None = None  # evaluations without improvement before stopping; None = never
    min_delta: float = 0.0  # an improvement must beat the best by more than this
    keep_best: bool = True  # end with the best evaluated state (else the last)
    checkpoint_every: int = 0  # steps between checkpoints besides evaluations and the end
    fused: bool | None = None  # fused optimiser kernel: None = where torch supports it
    seed: int = 0  # seeds the RNG that dropout and the like draw from

    def __post_init__(self) -> None:
        object.__setattr__(self, "betas", tuple(float(b) for b in self.betas))
        if self.steps < 1:
            raise FitError(f"steps must be >= 1, got {self.steps}")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise FitError(f"lr must be a positive finite number, got {self.lr}")
        if self.optimizer not in OPTIMIZERS:
            raise FitError(f"optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}")
        if self.schedule not in SCHEDULES:
            raise FitError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        for name in ("warmup", "eval_every", "checkpoint_every"):
            if getattr(self, name) < 0:
                raise FitError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.accumulate < 1:
            raise FitError(f"accumulate must be >= 1, got {self.accumulate}")
        if self.patience is not None and self.patience < 1:
            raise FitError(f"patience must be None (never stop early) or >= 1, got {self.patience}")
        if self.grad_clip is not None and not self.grad_clip > 0:
            raise FitError(f"grad_clip must be None or > 0, got {self.grad_clip}")
        if not 0 <= self.min_lr_ratio <= 1:
            raise FitError(f"min_lr_ratio must lie in [0, 1], got {self.min_lr_ratio}")


def lr_at(cfg: FitConfig, step: int) -> float:
    """Learning rate of optimiser step ``step`` (0-based): warm-up, then constant or cosine."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / (cfg.warmup + 1)
    if cfg.schedule == "constant":
        return cfg.lr
    span = max(1, cfg.steps - cfg.warmup)
    progress = min(1.0, (step - cfg.warmup) / span)
    low = cfg.min_lr_ratio * cfg.lr
    return low + 0.5 * (1 + math.cos(math.pi * progress)) * (cfg.lr - low)


def epoch_batch(n: int, batch_size: int, step: int, seed: int) -> torch.Tensor:
    """Indices of the batch of ``step``: a seeded permutation of ``range(n)`` per epoch, sliced.

    The same ``(n, batch_size, step, seed)`` always gives the same batch, so a resumed fit sees
    the data an uninterrupted one sees, and every variant fitted with one seed sees one order.
    """
    if n < 1 or batch_size < 1:
        raise FitError(f"need n >= 1 and batch_size >= 1, got {n} and {batch_size}")
    per_epoch = max(1, math.ceil(n / batch_size))
    epoch, k = divmod(step, per_epoch)
    return _epoch_order(n, epoch, seed)[k * batch_size:(k + 1) * batch_size].clone()


@functools.lru_cache(maxsize=2)
def _epoch_order(n: int, epoch: int, seed: int) -> torch.Tensor:
    # cached: a trainer draws every micro-batch of an epoch from one permutation of millions of windows
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed * 100_003 + epoch))


def random_batch(n: int, batch_size: int, step: int, seed: int) -> torch.Tensor:
    """Indices of the batch of ``step``, drawn with replacement from a generator seeded by (seed, step)."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    return torch.randint(0, n, (batch_size,), generator=g)


@dataclass
class FitResult:
    """What a fit returns. ``module`` holds the best (or last) state; ``history`` every record."""

    module: nn.Module
    steps: int  # optimiser steps taken in all (across resumptions)
    finished: bool  # False when interrupted (stop_after)
    stopped_early: bool  # True when patience ran out (the fit converged on held-out data)
    best: float | list[float] | None  # best held-out value(s)
    best_step: int | list[int] | None
    history: list[dict[str, Any]]
    seconds: float
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def train_loss(self) -> list[float]:
        return [r["loss"] for r in self.history if "loss" in r]

    @property
    def evals(self) -> list[tuple[int, Any]]:
        return [(r["step"], r["eval"]) for r in self.history if "eval" in r]


# --------------------------------------------------------------------------------------------
# Setting up: what to optimise, the optimiser, a fresh or resumed start
# --------------------------------------------------------------------------------------------


def _trainable(module: nn.Module, param_groups: Iterable | None) -> tuple[list, list[torch.Tensor]]:
    """The optimiser's groups (``param_groups``, else the trainable parameters) and their flat parameter list."""
    groups = list(param_groups) if param_groups is not None else [p for p in module.parameters()
                                                                    if p.requires_grad]
    if not groups:
        raise FitError("nothing to optimise: the module has no parameter with requires_grad=True")
    return groups, [p for g in groups for p in (g["params"] if isinstance(g, dict) else [g])]


def _optimizer(cfg: FitConfig, groups) -> torch.optim.Optimizer:
    """Adam or AdamW over ``groups``, fused where torch supports it (see ``FitConfig.fused``)."""
    cls = torch.optim.AdamW if cfg.optimizer == "adamw" else torch.optim.Adam
    kwargs: dict[str, Any] = {"lr": cfg.lr, "betas": cfg.betas, "weight_decay": cfg.weight_decay}
    params = [p for g in groups for p in (g["params"] if isinstance(g, dict) else [g])]
    # Fused kernels (CUDA, and CPU since torch 2.4) need floating-point parameters; where the
    # automatic choice fails, fall back to the default implementation.
    fused = cfg.fused if cfg.fused is not None else all(p.is_floating_point() for p in params)
    if fused:
        kwargs["fused"] = True
    try:
        return cls(groups, **kwargs)
    except (RuntimeError, TypeError, ValueError):
        if not fused or cfg.fused:
            raise
        kwargs.pop("fused")
        return cls(groups, **kwargs)


def _fresh_state(extra: dict[str, Any] | None) -> dict[str, Any]:
    """The loop state of a fit that has not started (checkpointed as is: keep the keys and their order)."""
    return {"step": 0, "history": [], "best": None, "best_step": None, "best_state": None,
            "bad_evals": 0, "stopped_early": False, "seconds": 0.0, "extra": dict(extra or {})}


def read_checkpoint(path: str | Path, *, restart: str = "start the fit over") -> Any:
    """The object in checkpoint ``path``, its sha256 checked (``cache.load_verified``, which unpickles
    nothing but tensors and plain values). A checkpoint without its digest file (not written by
    residshift, or by a version before digests), whose bytes changed after it was written, or that
    cannot be read is refused with a FitError naming the file and the fix (``delete it to <restart>``):
    nothing resumes from unchecked or damaged weights, and nothing in such a file runs."""
    path = Path(path)
    try:
        return load_verified(path, map_location="cpu")  # refuses a file without its digest file too
    except DamagedFileError as err:
        raise FitError(f"checkpoint {path} is damaged ({err.reason}); delete it to {restart}") from err


class _Checkpoint:
    """Atomic, resumable checkpoints of one fit at ``path`` (None = none); only ``write`` processes save."""

    def __init__(self, path: str | Path | None, config: dict[str, Any], write: bool):
        self.path = Path(path) if path is not None else None
        self.config = config  # asdict(cfg): a checkpoint of another configuration is refused
        self.write = write

    def load(self, module: nn.Module, opt: torch.optim.Optimizer) -> dict[str, Any] | None:
        """Restore module, optimiser and RNG from the checkpoint and return its loop state; None if there is none."""
        if self.path is None or not self.path.is_file():
            return None
        ckpt = self.path
        saved = read_checkpoint(ckpt)
        if not isinstance(saved, dict) or saved.get("format") != FORMAT:
            raise FitError(f"{ckpt} is not a residshift fit checkpoint; delete it to start over")
        if saved["config"] != self.config:
            raise FitError(f"checkpoint {ckpt} belongs to another fit configuration "
                           f"({saved['config']} vs {self.config}); delete it to start over")
        module.load_state_dict(saved["module"])
        opt.load_state_dict(saved["opt"])
        torch.set_rng_state(saved["rng"])
        if saved.get("cuda_rng") is not None and torch.cuda.is_available():  # dropout on the GPU
            torch.cuda.set_rng_state(saved["cuda_rng"])
        return saved["state"]

    def save(self, module: nn.Module, opt: torch.optim.Optimizer, state: dict[str, Any]) -> None:
        """Write module, optimiser, RNG and loop state in one atomic replace (a no-op without a path or off main)."""
        if self.path is not None and self.write:
            save_verified({"format": FORMAT, "config": self.config, "module": module.state_dict(),
                               "opt": opt.state_dict(), "rng": torch.get_rng_state(),
                               "cuda_rng": torch.cuda.get_rng_state() if torch.cuda.is_initialized() else None,
                               "state": state}, self.path)


def _start_or_resume(cfg: FitConfig, ckpt: _Checkpoint, module: nn.Module, opt: torch.optim.Optimizer,
                     extra: dict[str, Any] | None) -> tuple[dict[str, Any], int | None]:
    """The loop state, resumed from ``ckpt`` or fresh (RNG seeded), and the step resumed at (None = fresh)."""
    state = ckpt.load(module, opt)
    if state is not None:
        return state, state["step"]
    torch.manual_seed(cfg.seed)
    return _fresh_state(extra), None


# --------------------------------------------------------------------------------------------
# One optimiser step
# --------------------------------------------------------------------------------------------


def _set_lr(opt: torch.optim.Optimizer, lr: float) -> None:
    """Set ``lr`` on every parameter group (the schedule is :func:`lr_at`), times the group's
    ``lr_scale`` where it has one (e.g. learned gates in a group of their own)."""
    for g in opt.param_groups:
        g["lr"] = lr * g["lr_scale"] if "lr_scale" in g else lr


def _micro_steps(step: int, accumulate: int, step_fn: Callable, no_sync: Callable[[], ContextManager] | None) -> list:
    """Run the ``accumulate`` micro-steps of ``step`` (all but the last inside ``no_sync()``); their losses."""

    def backward(loss: torch.Tensor) -> None:
        (loss / accumulate).backward()

    losses = []
    for micro in range(accumulate):
        last_micro = micro == accumulate - 1
        with no_sync() if no_sync is not None and not last_micro else contextlib.nullcontext():
            losses.append(step_fn(step, micro, backward))
    return losses


def _clip(params: list[torch.Tensor], max_norm: float | None) -> float | None:
    """Clip the global gradient norm to ``max_norm``; the norm before clipping (None = no clipping)."""
    return None if max_norm is None else float(torch.nn.utils.clip_grad_norm_(params, max_norm))


def _mean_loss(losses: list) -> tuple[list[float], float]:
    """Each part's mean over the micro-steps (one part, or one per layer), and their mean: the step's loss."""
    parts = [_as_list(x) for x in losses]
    parts = [sum(col) / len(col) for col in zip(*parts)]
    return parts, sum(parts) / len(parts)


def _as_list(value) -> list[float]:
    """A number, a sequence or a tensor of numbers as a flat list of floats."""
    if isinstance(value, torch.Tensor):
        return [float(v) for v in value.detach().reshape(-1)]
    if isinstance(value, (list, tuple)):
        return [float(v) for v in value]
    return [float(value)]


def _step_record(step: int, loss: float, parts: list[float], lr: float, seconds: float,
                 grad_norm: float | None, tokens_per_step: int | None) -> dict[str, Any]:
    """The history / log record of the optimiser step that ended at ``step``."""
    record = {"step": step, "loss": loss, "lr": lr, "seconds": seconds}
    if len(parts) > 1:
        record["parts"] = parts
    if grad_norm is not None:
        record["grad_norm"] = grad_norm
    if tokens_per_step:
        record["tokens"] = step * tokens_per_step
        record["tokens_per_s"] = tokens_per_step / seconds if seconds > 0 else None
    return record


def _train_step(state: dict[str, Any], cfg: FitConfig, opt: torch.optim.Optimizer, params: list[torch.Tensor],
                step_fn: Callable, no_sync: Callable[[], ContextManager] | None,
                tokens_per_step: int | None) -> dict[str, Any]:
    """Take optimiser step ``state["step"]`` (schedule, micro-steps, clipping, update), count it; its record."""
    t0 = time.perf_counter()
    step = state["step"]
    lr = lr_at(cfg, step)
    _set_lr(opt, lr)
    opt.zero_grad(set_to_none=True)
    losses = _micro_steps(step, cfg.accumulate, step_fn, no_sync)
    grad_norm = _clip(params, cfg.grad_clip)
    opt.step()
    state["step"] += 1
    seconds = time.perf_counter() - t0
    state["seconds"] += seconds
    parts, loss = _mean_loss(losses)
    if not math.isfinite(loss):
        raise FitError(f"the training loss is {loss} at step {step}: lower the learning rate "
                       f"(lr={cfg.lr}) or enable grad_clip")
    return _step_record(state["step"], loss, parts, lr, seconds, grad_norm, tokens_per_step)


# --------------------------------------------------------------------------------------------
# Evaluation, best states and early stopping
# --------------------------------------------------------------------------------------------


def _due(step: int, every: int) -> bool:
    """Whether a periodic action with period ``every`` (0 = never) falls on ``step``."""
    return bool(every) and step % every == 0


def _improved(values: list[float], best: list[float], min_delta: float) -> list[bool]:
    """Which parts beat their best by more than ``min_delta`` (lower is better)."""
    return [v < b - min_delta for v, b in zip(values, best)]


def _out_of_patience(patience: int | None, bad_evals: int) -> bool:
    """Whether early stopping ends the fit: ``patience`` evaluations in a row without an improvement."""
    return patience is not None and bad_evals >= patience


def _snapshot(module: nn.Module) -> dict[str, torch.Tensor]:
    """A detached copy of ``module``'s state dict."""
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def _update_best(state: dict[str, Any], values: list[float], cfg: FitConfig, module: nn.Module,
                 best_keys: Callable[[int], Sequence[str]] | None) -> None:
    """Fold one evaluation into ``state``: each improved part's best value, step and state; the patience count."""
    if state["best"] is None:
        state["best"], state["best_step"] = [math.inf] * len(values), [state["step"]] * len(values)
        state["best_state"] = _snapshot(module) if cfg.keep_best else None  # (a trainer keeps the last state)
    if len(values) != len(state["best"]):
        raise FitError(f"eval_fn returned {len(values)} values, earlier {len(state['best'])}")
    improved = _improved(values, state["best"], cfg.min_delta)
    current = None
    for i, ok in enumerate(improved):
        if not ok:
            continue
        state["best"][i], state["best_step"][i] = values[i], state["step"]
        if state["best_state"] is None:
            continue
        current = current or module.state_dict()
        keys = best_keys(i) if best_keys is not None and len(values) > 1 else list(current)
        for k in keys:
            state["best_state"][k] = current[k].detach().clone()
    state["bad_evals"] = 0 if any(improved) else state["bad_evals"] + 1
    if _out_of_patience(cfg.patience, state["bad_evals"]):
        state["stopped_early"] = True


def _evaluate(state: dict[str, Any], cfg: FitConfig, module: nn.Module, eval_fn: Callable[[], Any],
              best_keys: Callable[[int], Sequence[str]] | None,
              eval_extra: Callable[[], dict[str, Any]] | None) -> dict[str, Any]:
    """Evaluate on held-out data (no gradients), update the best in ``state``; the evaluation's record."""
    with torch.no_grad():
        values = _as_list(eval_fn())
    _update_best(state, values, cfg, module, best_keys)
    record = {"step": state["step"], "eval": values if len(values) > 1 else values[0],
              "best": list(state["best"]) if len(values) > 1 else state["best"][0]}
    if eval_extra is not None:
        record.update({k: v for k, v in eval_extra().items() if k not in record})
    return record


# --------------------------------------------------------------------------------------------
# Reporting: the log, the progress bar, the result
# --------------------------------------------------------------------------------------------


class _Log:
    """JSON-lines log; on resume, records past the checkpoint's step are dropped (atomically)."""

    def __init__(self, path: Path | None, resume_step: int | None):
        self.path = Path(path) if path is not None else None
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume_step is None:
            atomic_write_text(self.path, "")
        elif self.path.is_file():
            kept = [line for line in self.path.read_text().splitlines()
                    if line.strip() and json.loads(line).get("step", 0) <= resume_step]
            atomic_write_text(self.path, "".join(line + "\n" for line in kept))

    def write(self, record: dict[str, Any]) -> None:
        """Append ``record`` as one JSON line."""
        if self.path is not None:
            with open(self.path, "a") as f:
                f.write(json.dumps(record) + "\n")


def _progress_bar(label: bool | str, total: int, initial: int):
    """A tqdm bar over the steps, labelled ``label`` (True = "fit"); None when ``label`` is false."""
    if not label:
        return None
    return tqdm(total=total, initial=initial, desc=label if isinstance(label, str) else "fit",
                unit="step", leave=False)


def _show(bar, record: dict[str, Any]) -> None:
    """Advance ``bar`` by one step, showing the step's loss and tokens/s."""
    if bar is None:
        return
    shown = {"loss": f"{record['loss']:.4f}"}
    if record.get("tokens_per_s") is not None:
        shown["tok/s"] = f"{record['tokens_per_s']:,.0f}"
    bar.set_postfix(shown, refresh=False)
    bar.update(1)


def _result(module: nn.Module, cfg: FitConfig, state: dict[str, Any], finished: bool) -> FitResult:
    """Load the best state into ``module`` (a finished fit with ``keep_best``) and report the fit."""
    best = state["best"]
    if finished and cfg.keep_best and state["best_state"] is not None:
        module.load_state_dict(state["best_state"])
    scalar = best is not None and len(best) == 1
    return FitResult(module=module, steps=state["step"], finished=finished,
                     stopped_early=state["stopped_early"],
                     best=(best[0] if scalar else best), best_step=(state["best_step"][0] if scalar
                                                                    else state["best_step"]),
                     history=list(state["history"]), seconds=state["seconds"], extra=dict(state["extra"]))


# --------------------------------------------------------------------------------------------
# The loop
# --------------------------------------------------------------------------------------------


def fit(module: nn.Module, cfg: FitConfig, *, step_fn: Callable[[int, int, Callable], Any],
        eval_fn: Callable[[], Any] | None = None, param_groups: Iterable | None = None,
        best_keys: Callable[[int], Sequence[str]] | None = None,
        checkpoint: str | Path | None = None, log_path: str | Path | None = None,
        tokens_per_step: int | None = None, stop_after: int | None = None,
        progress: bool | str = False, no_sync: Callable[[], ContextManager] | None = None,
        is_main: bool = True, extra: dict[str, Any] | None = None,
        eval_extra: Callable[[], dict[str, Any]] | None = None) -> FitResult:
    """Optimise ``module``'s parameters (or ``param_groups``) with ``step_fn``; see the module docstring.

    - ``step_fn(step, micro, backward)`` computes the loss of its batch and calls ``backward(loss)``;
      it returns the loss value for the log: a number, or one per part (logged as ``parts``, with
      their mean as ``loss``).
    - ``eval_fn()`` returns the held-out value(s) to minimise; None = no evaluation (the last state).
    - ``checkpoint``: where to checkpoint and resume from. ``log_path``: the JSON-lines log.
    - ``tokens_per_step``: for the tokens/s column. ``progress``: a tqdm bar (a string is its label).
    - ``no_sync()``: a context for micro-steps before the last of a step (DDP's ``model.no_sync``).
    - ``is_main``: only the main process writes checkpoints and the log (DDP rank 0).
    - ``extra``: caller's numbers saved with the checkpoint and returned (e.g. the loss before fitting).
    - ``eval_extra()``: more fields for each evaluation record (e.g. learned gate values over training).
    """
    groups, params = _trainable(module, param_groups)
    opt = _optimizer(cfg, groups)
    ckpt = _Checkpoint(checkpoint, asdict(cfg), write=is_main)
    state, resume_step = _start_or_resume(cfg, ckpt, module, opt, extra)
    log = _Log(log_path if is_main else None, resume_step)

    def keep(record: dict[str, Any]) -> None:
        """Append ``record`` to the history (checkpointed) and the log."""
        state["history"].append(record)
        log.write(record)

    def evaluate() -> None:
        """Evaluate, update the best state(s) and patience, record it."""
        keep(_evaluate(state, cfg, module, eval_fn, best_keys, eval_extra))

    bar = _progress_bar(progress if is_main else False, cfg.steps, state["step"])
    if eval_fn is not None and cfg.eval_at_start and state["step"] == 0 and state["best"] is None:
        evaluate()
        ckpt.save(module, opt, state)
    done_here, interrupted = 0, False
    try:
        while state["step"] < cfg.steps and not state["stopped_early"]:
            if stop_after is not None and done_here >= stop_after:
                interrupted = True
                break
            record = _train_step(state, cfg, opt, params, step_fn, no_sync, tokens_per_step)
            keep(record)
            done_here += 1
            last = state["step"] >= cfg.steps
            evaluated = eval_fn is not None and (last or _due(state["step"], cfg.eval_every))
            if evaluated:
                evaluate()
            _show(bar, record)
            if evaluated or last or state["stopped_early"] or _due(state["step"], cfg.checkpoint_every):
                ckpt.save(module, opt, state)
    finally:
        if bar is not None:
            bar.close()
    if interrupted:
        ckpt.save(module, opt, state)
    return _result(module, cfg, state, finished=not interrupted)
