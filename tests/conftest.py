"""Test isolation: no network, and results/figures written under a temporary folder.

The model and token caches (data/cache) are shared with normal use on purpose: the slow tests
reuse the dequantized embedded models instead of rebuilding them.
"""
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    # Under pytest-xdist: the cores shared among the workers, so two workers on two cores do not each
    # run two torch threads (set before torch is imported; notebook kernels inherit it).
    _per_worker = max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    os.environ.setdefault("OMP_NUM_THREADS", str(_per_worker))


SMOKE_FIXTURES = {"smoke_study", "smoke_site"}


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist: the first test that reads the smoke study goes first, so one worker starts
    the study at once; the other such tests go last, so the other worker runs everything else
    meanwhile instead of waiting for the study (every worker reorders alike, as xdist requires)."""
    if not hasattr(config, "workerinput"):
        return
    smoke = [i for i in items if SMOKE_FIXTURES & set(getattr(i, "fixturenames", ()))]
    if smoke:
        rest = [i for i in items if i not in set(smoke)]
        items[:] = smoke[:1] + rest + smoke[1:]


def pytest_collection_finish(session):
    """Under pytest-xdist, each worker that will run slow tests first makes sure the default embedded models
    are prepared (dequantized into data/cache/models). ``prepare_embedded``
    takes a lock per model (``core.models.preparing``), so the second worker waits and finds them
    ready; doing it here, before any test, keeps that wait out of the tests' own durations."""
    if not hasattr(session.config, "workerinput") or not any(i.get_closest_marker("slow") for i in session.items):
        return
    from residshift.core.models import default_embedded, prepare_embedded

    # Only the default ones (SmolLM2, Gemma-3): the on-demand ones (Qwen2.5-Coder-1.5B, 1.1 GB of parts
    # and about 14 GiB while it is dequantized) are no test's business.
    for name in default_embedded():
        prepare_embedded(name)


@pytest.fixture(autouse=True, scope="session")
def _isolated_outputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("residshift-outputs")
    old = {k: os.environ.get(k) for k in ("RESIDSHIFT_RESULTS", "RESIDSHIFT_FIGURES", "RESIDSHIFT_BUILD")}
    os.environ["RESIDSHIFT_RESULTS"] = str(root / "results")
    os.environ["RESIDSHIFT_FIGURES"] = str(root / "figures")
    os.environ["RESIDSHIFT_BUILD"] = str(root / "build")
    yield root
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="session")
def tiny_llama():
    from residshift.core.models import load_model

    return load_model("tiny-llama")


@pytest.fixture(scope="module")
def tiny():
    """The three tiny architectures, loaded once per test module."""
    from residshift.core.models import TINY, load_model

    return {name: load_model(name) for name in sorted(TINY)}


def random_windows(n, length, seed):
    """Seeded random byte-token windows for the tiny models (vocabulary 259, bytes < 256)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, length), generator=g)


@pytest.fixture(scope="session")
def smoke_study(tmp_path_factory, request):
    """Every notebook run once at the smoke profile, shared by the notebook and book tests.

    Returns ``(executed folder, figures folder, {notebook stem: failure message or None})``; one
    notebook's failure is recorded, not raised, so the others' tests still run. Under pytest-xdist the
    study runs once per session, not once per worker: the first worker that needs it runs it under a
    file lock in the folder all workers share, and the others wait for it and read what it wrote.
    """
    import fcntl
    import json

    from residshift.tools import runner
    from residshift.core.cache import atomic_write_text

    base = tmp_path_factory.getbasetemp()
    if hasattr(request.config, "workerinput"):
        base = base.parent  # the session's folder, above each worker's own
    root = base / "smoke-study"
    executed, figures, done = root / "smoke", root / "smoke" / "figures", root / "failures.json"
    root.mkdir(parents=True, exist_ok=True)
    with open(base / "smoke-study.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not done.exists():
            old = os.environ.get("RESIDSHIFT_FIGURES")
            os.environ["RESIDSHIFT_FIGURES"] = str(figures)  # as a plain smoke run writes them
            failures = {}
            try:
                for book in runner.list_notebooks():
                    try:
                        runner.run_notebooks("smoke", only=[book.stem], output_dir=executed,
                                             log=lambda *a, **k: None)
                        failures[book.stem] = None
                    except runner.RunFailed as err:
                        failures[book.stem] = str(err)
            finally:
                if old is None:
                    os.environ.pop("RESIDSHIFT_FIGURES", None)
                else:
                    os.environ["RESIDSHIFT_FIGURES"] = old
            atomic_write_text(done, json.dumps(failures))
    return executed, figures, json.loads(done.read_text())
