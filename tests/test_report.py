"""The README's numbers are generated from the saved results, never typed."""
import json

import pytest

from residshift.study import report


def test_readme_results_block_matches_the_saved_numbers():
    assert report.check_readme(), "README results are stale: run `python -m residshift report`"


def test_render_reads_the_saved_files(tmp_path):
    fig, bench = tmp_path / "figures", tmp_path / "benchmarks"
    fig.mkdir()
    bench.mkdir()
    assert "not produced yet" in report.render(fig, bench)
    (fig / "00-models-and-data.json").write_text(json.dumps({"perplexity": [
        {"model": "m", "windows": 4, "tokens": 252, "ppl": 12.345, "ppl_se": 0.5, "uniform_ppl": 259}]}))
    (fig / "09-x-verdicts.json").write_text(json.dumps({"m": {"c1": {"verdict": "reproduced", "d": 0.5}}}))
    text = report.render(fig, bench)
    assert "| m | 4 | 252 | 12.3 ± 0.5 | 259 |" in text
    assert "| m | c1 | **reproduced** | d=0.500 |" in text


def test_update_and_check_round_trip(tmp_path, monkeypatch):
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{report.START}\nold\n{report.END}\noutro\n")
    assert not report.check_readme(readme)
    assert report.update_readme(readme)
    assert report.check_readme(readme) and not report.update_readme(readme)
    text = readme.read_text()
    assert text.startswith("intro\n") and text.endswith("\noutro\n")
    readme.write_text("no markers")
    with pytest.raises(report.ReportError, match="results:start"):
        report.check_readme(readme)
