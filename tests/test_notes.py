"""Computed notebook text: the measured run time line."""
import json

from residshift.study import notes


def test_runtime_reads_runs_json(tmp_path, monkeypatch):
    monkeypatch.setenv("RESIDSHIFT_FIGURES", str(tmp_path))
    monkeypatch.setattr(notes, "REPO_ROOT", tmp_path / "nowhere")
    assert "not measured yet" in notes.runtime("03-alignment-curves")
    (tmp_path / "RUNS.json").write_text(json.dumps({"smoke": {"03-alignment-curves": {
        "wall_s": 42.0, "peak_rss_mib": 2048, "finished": "2026-11-30T10:00:00Z"}}}))
    line = notes.runtime("03-alignment-curves")
    assert "smoke: 42 s" in line and "peak 2.0 GiB" in line and "2026-11-30" in line
