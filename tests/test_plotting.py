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
        plotting._check_name(bad)
