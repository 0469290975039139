"""The one fitting loop: schedule, accumulation, clipping, early stopping, per-part best states,
resume equals uninterrupted, the log, and the errors."""
import json

import pytest
import torch
from torch import nn

from residshift.core import fitting as F


def _problem(seed=0, n=64, d=6, noise=0.3):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=g)
    w = torch.randn(d, 2, generator=g)
    Y = X @ w + noise * torch.randn(n, 2, generator=g)
    return X, Y


class Net(nn.Module):
    def __init__(self, d=6, dropout=0.0):
        super().__init__()
        torch.manual_seed(1)
        self.a = nn.Linear(d, 1)  # part 0
        self.b = nn.Linear(d, 1)  # part 1
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        x = self.drop(x)
        return torch.cat([self.a(x), self.b(x)], dim=-1)


def _fns(net, X, Y, batch=8, seed=0, per_part=False, Xh=None, Yh=None):
    Xh = X[:16] if Xh is None else Xh
    Yh = Y[:16] if Yh is None else Yh

    def step(step, micro, backward):
        idx = F.epoch_batch(len(X), batch, step, seed)
        loss = ((net(X[idx]) - Y[idx]) ** 2).mean()
        backward(loss)
        return loss.detach()

    def evaluate():
        net.eval()
        err = ((net(Xh) - Yh) ** 2).mean(0)
        net.train()
        err = err.detach()
        return err.tolist() if per_part else float(err.mean())

    return step, evaluate


def test_schedule_warmup_then_cosine_to_the_floor():
    cfg = F.FitConfig(steps=110, lr=1.0, warmup=10, schedule="cosine", min_lr_ratio=0.1)
    lrs = [F.lr_at(cfg, s) for s in range(110)]
    assert lrs[0] == pytest.approx(1 / 11) and lrs[9] == pytest.approx(10 / 11)
    assert lrs[10] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:]))
    assert F.lr_at(cfg, 110) == pytest.approx(0.1)
    assert F.lr_at(F.FitConfig(steps=5, lr=0.3), 4) == 0.3


def test_batches_are_a_function_of_step_and_seed():
    a = [F.epoch_batch(20, 8, s, 3) for s in range(6)]
    b = [F.epoch_batch(20, 8, s, 3) for s in range(6)]
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert sorted(torch.cat(a[:3]).tolist()) == list(range(20))  # one epoch covers every item once
    assert not torch.equal(F.epoch_batch(20, 8, 0, 4), a[0])
    assert torch.equal(F.random_batch(10, 4, 7, 1), F.random_batch(10, 4, 7, 1))


def test_fit_lowers_the_loss_and_logs(tmp_path):
    X, Y = _problem()
    net = Net()
    step, ev = _fns(net, X, Y)
    cfg = F.FitConfig(steps=40, lr=0.05, eval_every=10)
    r = F.fit(net, cfg, step_fn=step, eval_fn=ev, log_path=tmp_path / "log.jsonl", tokens_per_step=8)
    assert r.finished and r.steps == 40 and not r.stopped_early
    assert r.train_loss[-1] < r.train_loss[0] / 2
    assert [s for s, _ in r.evals] == [10, 20, 30, 40]
    lines = [json.loads(x) for x in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert len(lines) == 44 and lines[0]["tokens"] == 8 and "tokens_per_s" in lines[0]
    assert r.best == min(v for _, v in r.evals)


def test_keep_best_restores_the_best_evaluated_state():
    X, Y = _problem()
    net = Net()
    step, ev = _fns(net, X, Y)
    # A learning rate that diverges after a while: the best state is not the last.
    cfg = F.FitConfig(steps=30, lr=0.9, eval_every=1, eval_at_start=True)
    r = F.fit(net, cfg, step_fn=step, eval_fn=ev)
    assert r.best == pytest.approx(ev(), abs=1e-6)
    assert r.best == min(v for _, v in r.evals)


def test_early_stopping_stops_after_patience():
    X, Y = _problem()
    net = Net()
    step, ev = _fns(net, X, Y)
    cfg = F.FitConfig(steps=500, lr=0.05, eval_every=5, patience=2, min_delta=1e-3)
    r = F.fit(net, cfg, step_fn=step, eval_fn=ev)
    assert r.stopped_early and r.steps < 500
    evals = [v for _, v in r.evals]
    best_i = evals.index(min(evals))
    assert len(evals) - 1 - best_i >= 2


def test_each_part_keeps_its_own_best_state():
    X, Y = _problem()
    net = Net()
    # Part b's held-out target is scrambled: fitting makes it worse, so b keeps its start state.
    Yh = Y[:16].clone()
    Yh[:, 1] = torch.randn(16, generator=torch.Generator().manual_seed(9)) * 5
    step, ev = _fns(net, X, Y, per_part=True, Yh=Yh)
    start_b = {k: v.clone() for k, v in net.b.state_dict().items()}
    cfg = F.FitConfig(steps=30, lr=0.05, eval_every=5, eval_at_start=True)
    keys = {0: ["a.weight", "a.bias"], 1: ["b.weight", "b.bias"]}
    r = F.fit(net, cfg, step_fn=step, eval_fn=ev, best_keys=lambda i: keys[i])
    assert isinstance(r.best, list) and len(r.best) == 2
    assert r.best_step == [30, 0]  # a improved to the end; b was best before any step
    final = ev()
    assert final[0] == pytest.approx(r.best[0], abs=1e-6) and final[1] == pytest.approx(r.best[1], abs=1e-6)
    assert all(torch.equal(start_b[k], v) for k, v in net.b.state_dict().items())
    assert r.evals[-1][1][1] > r.best[1]  # the last state of b was worse: the best one was restored


def test_accumulation_equals_one_large_batch():
    X, Y = _problem()

    def run(accumulate, batch):
        net = Net()
        def step(s, micro, backward):
            idx = F.epoch_batch(len(X), 16, s, 0)[micro * batch:(micro + 1) * batch]
            loss = ((net(X[idx]) - Y[idx]) ** 2).mean()
            backward(loss)
            return loss.detach()
        F.fit(net, F.FitConfig(steps=5, lr=0.05, accumulate=accumulate, fused=False), step_fn=step)
        return net.a.weight.detach().clone()

    assert torch.allclose(run(1, 16), run(2, 8), atol=1e-6)


def test_gradient_clipping_is_applied_and_logged():
    X, Y = _problem()
    net = Net()
    step, _ = _fns(net, X, Y)
    r = F.fit(net, F.FitConfig(steps=3, lr=0.01, grad_clip=1e-3), step_fn=step)
    assert all("grad_norm" in h for h in r.history)


@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_resumed_fit_equals_uninterrupted(tmp_path, dropout):
    X, Y = _problem()
    cfg = F.FitConfig(steps=20, lr=0.05, eval_every=4, patience=50, optimizer="adamw",
                      weight_decay=0.1, warmup=3, schedule="cosine", checkpoint_every=3)
    net = Net(dropout=dropout)
    step, ev = _fns(net, X, Y)
    full = F.fit(net, cfg, step_fn=step, eval_fn=ev)
    w_full = {k: v.clone() for k, v in net.state_dict().items()}

    net2 = Net(dropout=dropout)
    step2, ev2 = _fns(net2, X, Y)
    ck, log = tmp_path / "ck.pt", tmp_path / "log.jsonl"
    part = F.fit(net2, cfg, step_fn=step2, eval_fn=ev2, checkpoint=ck, log_path=log, stop_after=7)
    assert not part.finished and part.steps == 7 and ck.is_file()
    # a fresh process: new module, new closures, same checkpoint
    net3 = Net(dropout=dropout)
    step3, ev3 = _fns(net3, X, Y)
    rest = F.fit(net3, cfg, step_fn=step3, eval_fn=ev3, checkpoint=ck, log_path=log)
    assert rest.finished and rest.steps == 20
    assert rest.train_loss == pytest.approx(full.train_loss, abs=1e-6)
    assert rest.evals == full.evals
    for k, v in net3.state_dict().items():
        assert torch.allclose(v, w_full[k], atol=1e-6), k
    steps = [json.loads(x)["step"] for x in log.read_text().splitlines() if "loss" in json.loads(x)]
    assert steps == list(range(1, 21))  # no duplicates from the interrupted part


def test_errors_name_the_fix(tmp_path):
    with pytest.raises(F.FitError, match="steps"):
        F.FitConfig(steps=0, lr=0.1)
    with pytest.raises(F.FitError, match="lr"):
        F.FitConfig(steps=1, lr=float("nan"))
    with pytest.raises(F.FitError, match="optimizer"):
        F.FitConfig(steps=1, lr=0.1, optimizer="sgd")
    with pytest.raises(F.FitError, match="patience"):
        F.FitConfig(steps=1, lr=0.1, patience=0)
    X, Y = _problem()
    net = Net()
    step, ev = _fns(net, X, Y)
    ck = tmp_path / "ck.pt"
    F.fit(net, F.FitConfig(steps=2, lr=0.1), step_fn=step, checkpoint=ck)
    with pytest.raises(F.FitError, match="another fit configuration"):
        F.fit(net, F.FitConfig(steps=3, lr=0.1), step_fn=step, checkpoint=ck)
    ck.write_bytes(b"not a checkpoint")
    with pytest.raises(F.FitError, match="delete it"):
        F.fit(net, F.FitConfig(steps=2, lr=0.1), step_fn=step, checkpoint=ck)
    frozen = nn.Linear(2, 2).requires_grad_(False)
    with pytest.raises(F.FitError, match="nothing to optimise"):
        F.fit(frozen, F.FitConfig(steps=1, lr=0.1), step_fn=step)

    def bad(s, m, backward):
        loss = torch.tensor(float("nan"), requires_grad=True)
        backward(loss)
        return loss
    with pytest.raises(F.FitError, match="learning rate"):
        F.fit(Net(), F.FitConfig(steps=1, lr=0.1), step_fn=bad)


def test_eval_extra_fields_and_no_best_snapshots_when_keeping_the_last(tmp_path):
    X, Y = _problem()
    net = Net()
    step, ev = _fns(net, X, Y)
    ck, log = tmp_path / "ck.pt", tmp_path / "log.jsonl"
    cfg = F.FitConfig(steps=6, lr=0.05, eval_every=3, keep_best=False)
    r = F.fit(net, cfg, step_fn=step, eval_fn=ev, checkpoint=ck, log_path=log,
              eval_extra=lambda: {"w0": float(net.a.weight[0, 0]), "eval": "ignored"})
    evals = [x for x in r.history if "eval" in x]
    assert [e["step"] for e in evals] == [3, 6]
    assert evals[-1]["w0"] == pytest.approx(float(net.a.weight[0, 0]))
    assert all(isinstance(e["eval"], float) for e in evals)  # extras never overwrite the record's own fields
    logged = [json.loads(x) for x in log.read_text().splitlines() if "eval" in json.loads(x)]
    assert [e["w0"] for e in logged] == [e["w0"] for e in evals]
    assert torch.load(ck, weights_only=False)["state"]["best_state"] is None  # keep_best=False: no copy
    assert r.best == min(e["eval"] for e in evals)


def test_epoch_batch_cached_order_is_not_mutated_by_callers():
    a = F.epoch_batch(50, 10, 2, 7)
    expect = torch.randperm(50, generator=torch.Generator().manual_seed(7 * 100_003))[20:30]
    assert torch.equal(a, expect)
    a.zero_()
    assert torch.equal(F.epoch_batch(50, 10, 2, 7), expect)


def test_fit_keeps_its_keyword_arguments_and_defaults():
    import inspect

    params = inspect.signature(F.fit).parameters
    assert [(n, p.kind.name) for n, p in params.items()][:2] == [("module", "POSITIONAL_OR_KEYWORD"),
                                                                  ("cfg", "POSITIONAL_OR_KEYWORD")]
    defaults = {n: p.default for n, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    assert defaults == {"step_fn": inspect.Parameter.empty, "eval_fn": None, "param_groups": None,
                        "best_keys": None, "checkpoint": None, "log_path": None, "tokens_per_step": None,
                        "stop_after": None, "progress": False, "no_sync": None, "is_main": True,
                        "extra": None, "eval_extra": None}


def test_schedule_values_constant_and_cosine():
    cfg = F.FitConfig(steps=10, lr=0.5, warmup=4)
    assert [F.lr_at(cfg, s) for s in range(6)] == [0.1, 0.2, 0.5 * 3 / 5, 0.4, 0.5, 0.5]
    cos = F.FitConfig(steps=14, lr=2.0, warmup=4, schedule="cosine", min_lr_ratio=0.25)
    assert F.lr_at(cos, 4) == 2.0  # the peak right after warm-up
    assert F.lr_at(cos, 9) == pytest.approx(0.5 + 0.5 * 1.5)  # half-way: the mean of peak and floor
    assert F.lr_at(cos, 14) == pytest.approx(0.5) and F.lr_at(cos, 99) == pytest.approx(0.5)  # the floor


def test_due_improvement_and_patience_decisions():
    assert [s for s in range(1, 13) if F._due(s, 4)] == [4, 8, 12]
    assert not any(F._due(s, 0) for s in range(5))  # period 0: never
    assert F._improved([1.0, 2.0, 3.0], [1.5, 2.05, 2.0], 0.1) == [True, False, False]  # must beat by > min_delta
    assert F._improved([1.0], [F.math.inf], 0.0) == [True]  # the first evaluation always improves
    assert not F._out_of_patience(None, 10**6)  # None: never stop
    assert not F._out_of_patience(3, 2) and F._out_of_patience(3, 3)


def test_update_best_tracks_each_part_and_counts_evaluations_without_improvement():
    net = Net()
    cfg = F.FitConfig(steps=10, lr=0.1, patience=2)
    keys = {0: ["a.weight", "a.bias"], 1: ["b.weight", "b.bias"]}
    state = F._fresh_state(None)
    F._update_best(state, [2.0, 3.0], cfg, net, lambda i: keys[i])
    assert state["best"] == [2.0, 3.0] and state["best_step"] == [0, 0] and state["bad_evals"] == 0
    state["step"] = 5
    with torch.no_grad():
        net.a.weight.add_(1.0)
        net.b.weight.add_(1.0)
    F._update_best(state, [1.0, 4.0], cfg, net, lambda i: keys[i])  # part 0 improves, part 1 does not
    assert state["best"] == [1.0, 3.0] and state["best_step"] == [5, 0] and state["bad_evals"] == 0
    assert torch.equal(state["best_state"]["a.weight"], net.a.weight)
    assert not torch.equal(state["best_state"]["b.weight"], net.b.weight)
    F._update_best(state, [1.0, 3.0], cfg, net, lambda i: keys[i])  # ties do not improve
    assert state["bad_evals"] == 1 and not state["stopped_early"]
    F._update_best(state, [1.5, 3.5], cfg, net, lambda i: keys[i])
    assert state["bad_evals"] == 2 and state["stopped_early"]
    with pytest.raises(F.FitError, match="returned 1 values"):
        F._update_best(state, [1.0], cfg, net, None)


def test_step_loss_and_record():
    parts, loss = F._mean_loss([torch.tensor([1.0, 3.0]), [3.0, 5.0]])  # two micro-steps, two parts
    assert parts == [2.0, 4.0] and loss == 3.0
    assert F._mean_loss([torch.tensor(2.0), 4.0]) == ([3.0], 3.0)
    rec = F._step_record(3, 1.5, [1.5], 0.1, 0.5, None, None)
    assert list(rec) == ["step", "loss", "lr", "seconds"]  # the log's column order
    rec = F._step_record(3, 3.0, [2.0, 4.0], 0.1, 0.5, 0.7, 10)
    assert rec == {"step": 3, "loss": 3.0, "lr": 0.1, "seconds": 0.5, "parts": [2.0, 4.0], "grad_norm": 0.7,
                   "tokens": 30, "tokens_per_s": 20.0}
    assert F._step_record(1, 1.0, [1.0], 0.1, 0.0, None, 10)["tokens_per_s"] is None


def test_micro_steps_scale_backward_and_skip_sync_except_on_the_last():
    w = torch.zeros(1, requires_grad=True)
    entered = []

    class NoSync:
        def __enter__(self):
            entered.append(True)

        def __exit__(self, *exc):
            return False

    def step_fn(step, micro, backward):
        loss = (w * (micro + 1)).sum()
        backward(loss)
        return float(loss)

    losses = F._micro_steps(7, 4, step_fn, lambda: NoSync())
    assert losses == [0.0] * 4 and len(entered) == 3
    assert w.grad.item() == pytest.approx((1 + 2 + 3 + 4) / 4)
