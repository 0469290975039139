import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from residshift.study import plotting# noqa: E402


def test_save_figure_writes_both_formats_and_the_manifest(tmp_path, monkeypatch):
    monkeypatch.setenv("RESIDSHIFT_FIGURES", str(tmp_path))
    monkeypatch.setenv("RESIDSHIFT_PROFILE", "smoke")
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    paths = plotting.save_figure(fig, "07-demo-panel", parameters={"n": 3})
    assert [p.name for p in paths] == ["07-demo-panel.png", "07-demo-panel.pdf"]
    assert all(p.stat().st_size > 0 for p in paths)
    plotting.save_numbers("07-demo-panel", {"x": [1, 2]})
    manifest = json.loads((tmp_path / "MANIFEST.json").read_text())
    assert manifest["07-demo-panel.png"]["profile"] == "smoke"
    assert manifest["07-demo-panel.png"]["parameters"] == {"n": 3}
    assert set(manifest) == {"07-demo-panel.png", "07-demo-panel.pdf", "07-demo-panel.json"}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "no temporary files left"


@pytest.mark.parametrize("bad", ["demo", "7-demo", "07_demo", "07-Demo", "07-"])
def test_figure_names_follow_the_notebook(bad):
    with pytest.raises(ValueError, match="NN-short-name"):
        plotting.check_name(bad)


def test_manifest_records_the_code_state_not_output_dirtiness(tmp_path, monkeypatch):
    from residshift.core import cache

    monkeypatch.setenv("RESIDSHIFT_FIGURES", str(tmp_path))
    plotting.save_numbers("07-demo-state", {"x": 1})
    entry = json.loads((tmp_path / "MANIFEST.json").read_text())["07-demo-state.json"]
    state = cache.code_state()
    assert {k: entry[k] for k in ("commit", "code_dirty", "code_hash")} == state
    assert not entry["commit"].endswith("-dirty")  # the old suffix is gone: code_dirty says it
    assert isinstance(entry["code_dirty"], bool)


def test_code_dirty_follows_the_code_only(tmp_path, monkeypatch):
    """A scratch repository: rewriting an output keeps code_dirty false; editing code sets it."""
    import subprocess

    from residshift.core import cache

    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    (tmp_path / "residshift").mkdir()
    (tmp_path / "residshift" / "m.py").write_text("x = 1\n")
    (tmp_path / "figures").mkdir()
    (tmp_path / "figures" / "MANIFEST.json").write_text("{}\n")
    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    monkeypatch.setattr(cache, "REPO_ROOT", tmp_path)
    assert cache.code_state()["code_dirty"] is False
    (tmp_path / "figures" / "MANIFEST.json").write_text('{"a": 1}\n')  # outputs being rewritten
    assert cache.code_state()["code_dirty"] is False
    (tmp_path / "residshift" / "new.py").write_text("y = 2\n")  # untracked code counts
    assert cache.code_state()["code_dirty"] is True


def test_manifest_commits_and_problems(tmp_path):
    entries = {
        "03-a.json": {"commit": "abc1234", "code_dirty": False, "code_hash": "h"},
        "03-a.png": {"commit": "abc1234", "code_dirty": False, "code_hash": "h"},
        "04-b.json": {"commit": "def5678", "code_dirty": True, "code_hash": "h"},
        "05-c.json": {"commit": "0ld0000-dirty"},
    }
    (tmp_path / "MANIFEST.json").write_text(json.dumps(entries))
    assert plotting.manifest_commits(["03-a"], folder=tmp_path) == ["abc1234"]
    assert plotting.manifest_commits(["03-a.json", "04-b"], folder=tmp_path) == ["abc1234", "def5678-dirty"]
    assert plotting.manifest_commits(folder=tmp_path) == ["0ld0000-dirty", "abc1234", "def5678-dirty"]
    with pytest.raises(KeyError, match="09-nope"):
        plotting.manifest_commits(["09-nope"], folder=tmp_path)
    problems = plotting.manifest_problems(entries)
    assert len(problems) == 2 and "04-b.json" in problems[0] and "old-format" in problems[1]


def test_committed_figures_come_from_committed_code():
    """The committed manifest (``git show HEAD:figures/MANIFEST.json``), not the working tree's,
    which a user's own run from uncommitted code rewrites."""
    from committed import committed_json

    entries = committed_json("figures/MANIFEST.json")
    assert entries, "figures/MANIFEST.json is missing or empty"
    problems = plotting.manifest_problems(entries)
    assert not problems, f"{len(problems)} manifest entries:\n" + "\n".join(problems[:10])


def _ticks(ax, which):
    ax.figure.canvas.draw()
    lo, hi = ax.get_xlim() if which == "x" else ax.get_ylim()
    return [t for t in (ax.get_xticks() if which == "x" else ax.get_yticks()) if lo <= t <= hi]


@pytest.mark.parametrize("n_layers", [3, 7, 17, 30])
def test_integer_axis_never_ticks_half_a_block(n_layers):
    fig, ax = plt.subplots()
    try:
        ax.plot(range(n_layers + 1), range(n_layers + 1))
        if n_layers == 3:  # matplotlib's own choice: 0, 0.5, ..., 3
            assert not all(float(t).is_integer() for t in _ticks(ax, "x"))
        plotting.integer_axis(ax, "both")
        for which in ("x", "y"):
            ticks = _ticks(ax, which)
            assert len(ticks) >= 2 and all(float(t).is_integer() for t in ticks)
        plotting.integer_axis(ax, "x", max_ticks=4)
        assert len(_ticks(ax, "x")) <= 5
    finally:
        plt.close(fig)


def test_integer_axis_refuses_a_log_axis_and_a_bad_name():
    fig, ax = plt.subplots()
    try:
        ax.set_yscale("log")
        with pytest.raises(ValueError, match="log scale"):
            plotting.integer_axis(ax, "y")
        with pytest.raises(ValueError, match="'x', 'y' or 'both'"):
            plotting.integer_axis(ax, "z")
    finally:
        plt.close(fig)
