"""Executed notebooks a reader opens on a git host (``tools.render``): every published figure is a link
to its file, never its bytes a second time, in the notebook and in the markdown a git host renders; the
book builds from the rendered notebooks without running anything."""
import re

import nbformat
import pytest

from residshift.tools import book, render


@pytest.mark.slow
def test_rendered_notebooks_link_every_figure_and_store_no_image(smoke_study, tmp_path):
    executed, figures, failures = smoke_study
    out = tmp_path / "docs" / "run"
    sizes = render.render_all(executed, out, figures, log=lambda *a: None)
    ran = [stem for stem, why in failures.items() if why is None]
    assert sorted(sizes) == sorted(ran)
    for stem, s in sizes.items():
        md = (out / f"{stem}.md").read_text()
        saved = sorted(p.name for p in figures.glob(f"{stem[:2]}-*.png"))
        links = re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", md)
        linked = sorted({link.rsplit("/", 1)[-1] for link in links if f"{stem}_files/" not in link})
        assert linked == saved, stem  # every figure the notebook saved, shown from its file
        assert "data:image" not in md and "<style" not in md, stem  # a git host would print the CSS as text
        nb = nbformat.read(out / f"{stem}.ipynb", as_version=4)
        inline = [c.metadata.get("tags", []) for c in nb.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
        assert all("solution" in tags for tags in inline), stem  # only an exercise's own plot is not a saved figure
        assert s["images_inline"] == len(inline), stem
        assert s["ipynb_bytes"] < (executed / f"{stem}.ipynb").stat().st_size
    index = book.build_book("smoke", executed=out, figures=figures, out=tmp_path / "site", log=lambda *a, **k: None)
    page = (index.parent / "01-the-causal-shift.html").read_text()
    assert re.search(r'<img [^>]*src="figures/01-[^"]+\.png"', page)


def test_a_rendering_never_replaces_a_file_it_did_not_write(tmp_path):
    (tmp_path / "01-x.md").write_text("my notes\n")
    try:
        render.check_replaceable(tmp_path / "01-x.ipynb", tmp_path / "01-x.md")
        raise AssertionError("would replace the user's file")
    except render.OverwriteError as err:
        assert "01-x.md exists and residshift did not write it" in str(err)
    (tmp_path / "01-x.md").write_text(render.MD_MARK + "old rendering\n")
    render.check_replaceable(tmp_path / "01-x.ipynb", tmp_path / "01-x.md")  # its own: replaceable
