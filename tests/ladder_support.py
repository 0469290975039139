"""What the ladder's and the mitigation's tests share: folders of a test's own, a rung by name, and a
guard that fails the test if anything trains or reads the lens."""
from residshift.study import ladder as L
from residshift.train import trainer as T


def use_folders(monkeypatch, root):
    """Point the results and build folders at ``root``; returns the results folder."""
    monkeypatch.setenv("RESIDSHIFT_RESULTS", str(root / "results"))
    monkeypatch.setenv("RESIDSHIFT_BUILD", str(root / "build"))
    return root / "results"


def rung(P, name):
    return next(r for r in L.rungs(P) if r.name == name)


def no_training(monkeypatch, *more):
    """Make training, the lens and the speed probe (and each ``(module, name)`` of ``more``) fail the test."""
    def trained(*a, **k):
        raise AssertionError("trained")

    for module, name in ((T, "train"), (L, "read_lens"), (L, "measure_speed"), *more):
        monkeypatch.setattr(module, name, trained)
