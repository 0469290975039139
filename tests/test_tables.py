"""residshift.study.tables.verdict_table: whole cells whatever the display options, the rule one
click away in HTML, and still a DataFrame the notebooks index."""
import html
import re

import pandas as pd
import pytest

from residshift.analysis import verdicts as V
from residshift.study import tables

LONG = "larger excess top-1 over unigram (input or next) at the quietest middle layer h_2 (mean over seeds)"


def _row(**kw):
    base = dict(model="m", variant=None, claim_id="C2.late-cut", claim="a claim", verdict=V.REPRODUCED,
                statistic="mean dloss", estimate=-0.1, ci=(-0.2, -0.05), level=0.95, n=10, rule="a rule")
    return V.VerdictRow(**{**base, **kw})


@pytest.fixture
def rows():
    return [_row(claim_id="C1.middle", statistic=LONG, rule="C1.middle: the <middle> & its margin 0.02"),
            _row(claim_id="C1.depth", statistic="depth (top1)", rule="depth rule, top1"),
            _row(claim_id="C1.depth", statistic="depth (logrank)", rule="depth rule, logrank"),
            _row(model="other", variant="tuned lens", claim_id="C2.late-cut", rule="cut rule")]


@pytest.fixture
def narrow():
    with pd.option_context("display.max_colwidth", 12, "display.width", 80, "display.max_columns", 4):
        yield


def test_whole_cells_as_text_and_html_whatever_the_display_options(rows, narrow):
    table = tables.verdict_table(rows)
    text, page = repr(table), table._repr_html_()
    assert text == str(table) and LONG not in text and "verdict" in text  # plain text: verdict and estimate
    assert max(len(line) for line in text.splitlines()) < sum(tables.TEXT_WIDTHS.values()) + 10
    assert html.escape(LONG) in page and "..." not in page and "…" not in page
    assert repr(pd.DataFrame(table)).count(LONG) == 0  # what a plain DataFrame would have shown


def test_each_rule_is_one_click_away_in_html(rows):
    page = tables.verdict_table(rows)._repr_html_()
    folded = re.findall(r"<details><summary>rule</summary><div[^>]*>(.*?)</div></details>", page)
    assert folded == [html.escape(r.rule) for r in rows]  # in row order, escaped
    assert "<middle>" not in page and "&lt;middle&gt; &amp; its" in page


def test_it_is_still_the_dataframe_of_the_records(rows):
    table = tables.verdict_table(rows)
    assert isinstance(table, pd.DataFrame) and list(table.index.names) == ["model", "variant", "claim"]
    assert list(table.columns) == [c for c in tables.COLUMNS if c not in ("model", "variant", "claim")]
    assert table.reset_index().iloc[0].to_dict() == tables.verdict_record(rows[0])
    assert table.loc[("other", "tuned lens", "C2.late-cut"), "verdict"] == V.REPRODUCED


def test_selections_keep_the_display_and_the_right_rules(rows, narrow):
    table = tables.verdict_table(rows)
    sub = table.loc[lambda t: ~t.index.get_level_values("claim").str.startswith("C1")]  # as notebook 08 does
    assert type(sub) is tables.VerdictTable and sub.row_rules() == ["cut rule"]
    depth = table.loc[lambda t: t.index.get_level_values("claim") == "C1.depth"]
    assert depth.row_rules() == ["depth rule, top1", "depth rule, logrank"]  # same key, own rule each
    assert html.escape(LONG) in table.head(1)._repr_html_() and table.reset_index().row_rules() == [r.rule for r in rows]
    assert table.drop(columns="statistic").row_rules()[1] == "depth rule, top1\n\ndepth rule, logrank"
    assert "<details>" not in table.droplevel("claim")._repr_html_()  # rows no longer named: no rule column


def test_empty_table_renders():
    table = tables.verdict_table([])
    assert table.empty and "<table" in table._repr_html_() and repr(table)



def test_the_html_book_keeps_whole_cells_and_the_rule_buttons(rows):
    """An executed notebook's verdict table, as the book (tools.book) renders it."""
    import nbformat

    from residshift.tools import book

    table = tables.verdict_table(rows)
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("verdict_table(rows)")
    cell.outputs = [nbformat.v4.new_output("execute_result", execution_count=1,
                                           data={"text/html": table._repr_html_(), "text/plain": repr(table)})]
    nb.cells = [nbformat.v4.new_markdown_cell("# 09 · T\n\nA summary."), cell]
    body, _ = book._exporter().from_notebook_node(nb, resources={"book_nav": ""})
    assert body.count("<details><summary>rule</summary>") == len(rows)
    assert html.escape(LONG) in body and "&lt;middle&gt; &amp; its" in body
