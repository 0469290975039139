"""residshift.study.tour: the glue and figures of notebooks 00-02, checked against independent
computations on tiny random models and on hand-made inputs."""
import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from residshift.core import forward
from residshift.core import data, models
from residshift.measure import lens
from residshift.core.outputs import json_ready
from residshift.study import tour


class _Tok:
    """A tokenizer stand-in: id -> text."""

    def __init__(self, table):
        self.table = table

    def decode(self, ids):
        return "".join(self.table[i] for i in ids)


def test_json_ready_replaces_non_finite_and_plain_types():
    frame = pd.DataFrame({"m": ["a", "b"], "x": [1.0, float("nan")],
                          "n": pd.array([3, None], dtype="Int64")}).set_index("m")
    out = json_ready({"f": frame, "t": torch.tensor([1.5, float("inf")]), "g": np.float32(2.5),
                           "nested": [np.int64(3), (float("-inf"),)]})
    assert out["f"] == [{"m": "a", "x": 1.0, "n": 3}, {"m": "b", "x": None, "n": None}]
    assert out["t"] == [1.5, None] and out["g"] == 2.5 and type(out["g"]) is float
    assert out["nested"] == [3, [None]]


def test_token_text_makes_every_token_visible(monkeypatch):
    tok = _Tok({0: "\n", 1: "   ", 2: "", 3: "\x06a", 4: "abcdefghij", 5: "é", 6: "\u200d", 7: " door"})
    assert tour.token_text(tok, 0) == "\u21b5"
    assert tour.token_text(tok, 1) == "\u2423" * 3
    assert tour.token_text(tok, 2) == "\u2205"
    assert tour.token_text(tok, 3) == "⟨06⟩a"           # control characters as their byte
    assert tour.token_text(tok, 6) == "⟨U+200D⟩"       # format characters as their code point
    assert tour.token_text(tok, 7) == "␣door"          # a leading space is visible
    assert tour.token_text(tok, 4, width=5) == "abcd\u2026"
    monkeypatch.setattr(tour, "_drawable_codepoints", lambda: frozenset(range(128)))
    assert tour.token_text(tok, 5) == "é"
    assert tour.token_text(tok, 5, drawable=True) == "⟨U+00E9⟩"  # no font can draw it


@pytest.mark.parametrize("content, shown", [
    (" door", "␣door"), ("door", "door"), ("door ", "door␣"), ("  ", "␣␣"), (" " * 6, "␣×6"),
    ("New York", "New York"),                          # inner spaces stay spaces
    ("\n\n", "↵↵"), ("\t", "⇥"), ("\r\n", "⟨0D⟩↵"), ("\x7f", "⟨7F⟩"), ("\x85", "⟨U+0085⟩"),
    ("\u00a0", "⟨U+00A0⟩"), ("\u2028", "⟨U+2028⟩"), ("\ue000", "⟨U+E000⟩"),
    ("\ufffd", "⟨U+FFFD⟩"), ("\ufffd" * 8, "⟨U+FFFD⟩×8"),   # a literal replacement character
    ("\u3011", "\u3011"), ("\u0652", "◌\u0652"),          # printable; a bare combining mark on ◌
    (b"\xe3", "⟨E3⟩"), (b"\xe3\x80", "⟨E3 80⟩"),           # bytes that are not UTF-8, one run
    (b" \xe3\x80", "␣⟨E3 80⟩"), (b"\xe3\x80\x91", "\u3011"),  # ...and bytes that are
    (b"a\xffb\xfe", "a⟨FF⟩b⟨FE⟩"), ("", "∅"), (b"", "∅"),
])
def test_display_token_shows_every_character_as_a_printable_glyph(content, shown):
    text = tour.display_token(content)
    assert text == shown
    assert "\ufffd" not in text and "\\" not in text and all(c.isprintable() for c in text)


def test_display_token_cuts_to_width_without_splitting_a_notation():
    assert tour.display_token("abcdefghij", 7) == "abcdef…"
    assert tour.display_token("abc", 3) == "abc"
    assert tour.display_token("\u3011", 1) == "\u3011"
    assert tour.display_token(b"ab\xe3\x80cd", 6) == "ab…"   # ⟨E3 80⟩ does not fit: not cut in half
    assert tour.display_token(b" \xe0\xa8", 7) == "␣⟨E0 A8⟩"  # one unit after the spaces, whatever its size
    assert tour.display_token("\ufffd" * 8, 7) == "⟨U+FFFD⟩×8"


def test_undrawable_characters_follow_the_font_list(monkeypatch):
    import matplotlib

    monkeypatch.setitem(matplotlib.rcParams, "font.family", ["DejaVu Sans"])
    assert 0x41 in tour._drawable_codepoints() and 0x3011 not in tour._drawable_codepoints()
    assert tour.display_token("A\u3011", drawable=True) == "A⟨U+3011⟩"
    assert tour.display_token("A\u3011") == "A\u3011"
    monkeypatch.setitem(matplotlib.rcParams, "font.family", ["sans-serif"])  # a generic name resolves
    assert tour.display_token("door", drawable=True) == "door"


def test_token_content_recovers_bytes_a_decode_would_replace():
    class Pieces(_Tok):
        def __init__(self, table, pieces):
            super().__init__(table)
            self.pieces = pieces

        def convert_ids_to_tokens(self, i):
            return self.pieces[i]

    tok = Pieces({0: "\ufffd", 1: "\ufffd", 2: " door", 3: "\ufffd"},
                 {0: "<0xE3>", 1: "ãĢ", 2: "▁door", 3: "\ufffd"})  # sentencepiece, byte-level, text
    assert tour.token_content(tok, 0) == b"\xe3" and tour.token_text(tok, 0) == "⟨E3⟩"
    assert tour.token_content(tok, 1) == b"\xe3\x80" and tour.token_text(tok, 1) == "⟨E3 80⟩"
    assert tour.token_content(tok, 2) == " door" and tour.token_text(tok, 2) == "␣door"
    assert tour.token_content(tok, 3) == "\ufffd"                # the vocabulary's own U+FFFD
    assert tour.token_content(_Tok({0: "x"}), 0) == "x"            # no pieces: the decoded text


def test_token_text_on_a_real_byte_level_tokenizer(tiny_llama):
    tok = tiny_llama.tokenizer                         # byte-level BPE over single bytes
    ids = tok("】 a", add_special_tokens=False)["input_ids"]
    assert [tok.decode([i]) for i in ids][:3] == ["\ufffd"] * 3   # what a plain decode shows
    assert [tour.token_text(tok, i) for i in ids] == ["⟨E3⟩", "⟨80⟩", "⟨91⟩", "␣", "a"]


def test_slug():
    assert tour.slug("google/gemma-2_2b.it") == "google-gemma-2-2bit"
    assert tour.slug("smollm2-135m") == "smollm2-135m"


def test_model_row_checks_the_tie_two_ways(tiny_llama):
    row = tour.model_row(tiny_llama, 0.5)
    assert row["tied_same_tensor"] is True and row["write_probe_diff"] == 0.0
    assert row["layers"] == tiny_llama.info.n_layers and row["load_s"] == 0.5
    module = tiny_llama[0]._module
    before = module.get_input_embeddings().weight[0, 0].item()
    models.tie_write_probe(module)
    assert module.get_input_embeddings().weight[0, 0].item() == before  # the probe undoes its write


def test_tie_probe_sees_an_equal_copy():
    model, _ = models.build_tiny("tiny-llama")
    emb, head = model.get_input_embeddings(), model.get_output_embeddings()
    head.weight = torch.nn.Parameter(emb.weight.detach().clone())
    assert torch.equal(emb.weight, head.weight)
    assert models.tie_write_probe(model) == pytest.approx(1.0, abs=1e-5)


def test_sample_perplexity_matches_a_direct_computation(tiny_llama):
    lm, tok, info = tiny_llama
    got = tour.sample_perplexity(tiny_llama, corpus="wikitext-2", split="validation", window=16, n=3, seed=1)
    windows = data.token_windows("wikitext-2", "validation", tok, length=16, n=3, seed=1)
    with torch.no_grad():
        logits = lm._module(windows).logits
    ce = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), windows[:, 1:].reshape(-1))
    assert got["ppl"] == pytest.approx(math.exp(ce.item()), rel=1e-5)
    assert got["tokens"] == 3 * 15 and got["uniform_ppl"] == info.vocab_size and got["model"] == info.name
    table = tour.perplexity_table({info.name: tiny_llama}, corpus="wikitext-2", split="validation",
                                  window=16, n=3, seed=1)
    assert table.loc[info.name, "ppl / uniform"] == pytest.approx(got["ppl"] / info.vocab_size)


def test_tables_and_panels_of_notebook_00_are_json_ready():
    import matplotlib.pyplot as plt

    corpora = pd.DataFrame([
        {"corpus": "a", "split": "x", "rows": 2, "characters": 30, "words": 10, "description": "A",
         "tokens[m1]": 20, "tokens[m2]": 15},
        {"corpus": "b", "split": "y", "rows": 4, "characters": None, "words": None, "description": "B",
         "tokens[m1]": None, "tokens[m2]": None}])
    fig, numbers = tour.tokens_panel(corpora, ["m1", "m2"])
    plt.close(fig)
    per_word = {r["tokenizer"]: r["tokens per word"] for r in numbers["tokens_per_word"]}
    assert per_word == {"m1": 2.0, "m2": 1.5}
    ppl = pd.DataFrame([{"model": "m1", "ppl": 20.0, "ppl_se": float("nan"), "loss": 3.0, "loss_se": 0.1,
                         "uniform_ppl": 100, "tokens": 60}]).set_index("model")
    fig, numbers = tour.perplexity_panel(ppl, corpus="c", split="s", window=16, n=1)
    plt.close(fig)
    assert numbers["models"][0]["ppl_se"] is None
    models_table = pd.DataFrame([{"name": "m1", "logit_softcap": None}]).set_index("name")
    saved = tour.tour_numbers(models_table, ppl, corpora)
    assert saved["corpora"][1]["words"] is None and saved["perplexity"][0]["model"] == "m1"


def test_position_table_and_regime_shares_count_by_hand():
    tok = _Tok({i: f"w{i}" for i in range(10)})
    ids = torch.tensor([0, 1, 2, 3, 4])
    top1 = torch.tensor([[0, 1, 2, 3, 4],      # layer 0: every position decodes its input
                         [9, 2, 3, 9, 9],      # layer 1: t=1,2 decode the next token
                         [9, 9, 9, 4, 9]])     # layer 2: t=3 decodes the next token
    table = tour.position_table(tok, ids, top1, layers=(0, 2))
    assert list(table.index) == [0, 1, 2, 3]
    assert table.loc[3, "next x_t+1"] == "'w4'" and table.loc[3, "layer 2"] == "'w4'"
    shares = tour.regime_shares(lens.classify_decoded(top1, ids))   # positions t = 1..3
    assert shares.loc["layer 0", "input"] == 1.0
    assert shares.loc["layer 1", "next"] == round(2 / 3, 2) and shares.loc["layer 1", "other"] == round(1 / 3, 2)
    assert shares.loc["layer 2", "next"] == round(1 / 3, 2)


def test_layer0_misdecodes_explains_a_longer_row():
    E = torch.tensor([[1.0, 0.0], [3.0, 1.0], [0.0, 1.0]])   # row 1 is longer and close to row 0
    info = SimpleNamespace(embedding=E)
    tok = _Tok({0: "a", 1: "b", 2: "c"})
    ids = torch.tensor([0, 2, 0])
    top1 = torch.tensor([[1, 2, 0]])                     # position 0 decodes row 1 at layer 0
    table, median = tour.layer0_misdecodes(tok, info, ids, top1)
    assert list(table.index) == [0]
    row = table.loc[0]
    assert row["decoded at layer 0"] == "'b'" and row["|e_decoded|"] == round(math.sqrt(10), 2)
    assert bool(row["longer row wins without gain"]) is True      # 3 > 1 = e_0 . e_0
    assert median == 1.0


def test_shift_curves_match_the_reference_lens(tiny):
    lm, tok, info = tiny["tiny-gemma3"]                  # has a soft-cap and an embedding scale
    ids = lens.encode(tok, info, "The cat sat on the mat, and the dog sat on the log.")
    hs = forward.collect_residuals(lm, info, ids)
    curves = tour.shift_curves(info, hs, ids, model=info.name, sentence="s")
    ref = lens.reference_metrics(info, hs, ids)          # the oracle: [L+1, 1, positions] per column
    for l in (0, info.n_layers // 2, info.n_layers):
        for which in lens.WHICH:
            median = lambda c: float(np.median(ref[f"{c}_{which}"][l, 0].numpy()))  # noqa: E731
            assert curves[f"rank_{which}_median"][l] == pytest.approx(median("rank"))
            assert curves[f"logprob_{which}_median"][l] == pytest.approx(median("logprob"), abs=1e-4)
            assert curves[f"cos_raw_{which}_median"][l] == pytest.approx(median("cos_raw"), abs=1e-4)
    assert curves["positions"] == ids.shape[1] - 2 and set(curves["events"]) == {
        "rank crossing", "log-prob crossing", "input leaves top-1", "next becomes top-1"}


def test_crossings_on_hand_made_curves():
    numbers = {"rank_input_median": [1, 4, 50, 80], "rank_next_median": [90, 10, 2, 1],
               "logprob_input_median": [0, -2, -6, -8], "logprob_next_median": [-9, -5, -1, -0.5]}
    ev = tour.crossings(numbers, 3)
    assert ev["input leaves top-1"] == {"layer": 1, "relative depth": 0.33}
    assert ev["next becomes top-1"] == {"layer": 3, "relative depth": 1.0}
    assert 1 < ev["rank crossing"]["layer"] <= 2 and 1 < ev["log-prob crossing"]["layer"] <= 2
    never = tour.crossings({**numbers, "rank_next_median": [90, 90, 90, 90]}, 3)
    assert never["rank crossing"] is None and never["next becomes top-1"] is None
    table = tour.crossing_table({"events": never})
    assert table.loc["next becomes top-1", "layer"] == "never"


def test_trajectory_map_is_readable_and_its_numbers_are_the_labels(tiny_llama):
    import matplotlib.pyplot as plt

    entry = tour.decode_sentences(tiny_llama, ["Hello there, world.", "One, two, three."])
    figs, numbers = tour.trajectory_map("tiny-llama", entry)
    try:
        assert {part.split("-tokens")[0] for part in figs} == {"sentence-1", "sentence-2"}  # long ones cut
        assert all(fig.get_figwidth() <= tour.SLIDE_INCHES[0] and fig.get_figheight() <= tour.SLIDE_INCHES[1]
                   for fig in figs.values())
        sizes = [t.get_fontsize() for fig in figs.values() for t in fig.findobj(plt.Text) if t.get_text()]
        assert min(sizes) >= tour.MAP_FONT
    finally:
        plt.close("all")
    tok = tiny_llama.tokenizer
    for s, got in zip(entry["sentences"], numbers["sentences"]):
        assert got["labels"] == lens.classify_decoded(s["top1"], s["ids"]).tolist()
        assert got["top1"][0] == [tok.decode([int(i)]) for i in s["top1"][0]]
        assert got["top1_shown"][0] == [tour.token_text(tok, i, 7, drawable=True) for i in s["top1"][0]]


def test_decoded_sentences_are_cached_and_a_weight_change_misses(tiny_llama, monkeypatch):
    """A warm rerun of notebook 02 traces nothing; other weights or other sentences recompute."""
    first = tour.decode_sentences(tiny_llama, ["A cached sentence.", torch.tensor([5, 6, 7])])
    calls = []
    real = lens.decode_top
    monkeypatch.setattr(lens, "decode_top", lambda *a, **k: calls.append(1) or real(*a, **k))
    again = tour.decode_sentences(tiny_llama, ["A cached sentence.", torch.tensor([5, 6, 7])])
    assert calls == []
    for a, b in zip(first["sentences"], again["sentences"]):
        assert a["sentence"] == b["sentence"] and a["n_tokens"] == b["n_tokens"]
        assert all(torch.equal(a[k], b[k]) for k in ("ids", "top1", "labels"))
    assert again["tok"] is tiny_llama[1] and again["info"] is tiny_llama[2]
    tour.decode_sentences(tiny_llama, ["Another sentence."])
    assert len(calls) == 1
    module = tiny_llama[0]._module
    w = next(module.parameters())
    with torch.no_grad():
        w.add_(1.0)  # other weights: a miss
        try:
            tour.decode_sentences(tiny_llama, ["A cached sentence."])
        finally:
            w.sub_(1.0)
    assert len(calls) == 2


def test_trajectory_map_draws_the_shown_tokens_in_cells_and_axis_alike(tiny_llama):
    """Cells and axis labels come from token_text: a leading space is ␣ in both, no cell holds
    U+FFFD or a Python escape, and the block axis has integer ticks."""
    import matplotlib.pyplot as plt

    entry = tour.decode_sentences(tiny_llama, ["Tower and the door \u3011 here"])
    figs, numbers = tour.trajectory_map("tiny-llama", entry)
    try:
        axes = [fig.axes[0] for fig in figs.values()]  # one sentence, maybe cut into token ranges
        cells = [[t.get_text() for t in ax.texts] for ax in axes]
        ticks = [t.get_text() for ax in axes for t in ax.get_xticklabels()]
        ax = axes[0]
        yticks = ax.get_yticks()
    finally:
        plt.close("all")
    got = numbers["sentences"][0]
    cuts = [len(ax.get_xticks()) for ax in axes]
    starts = np.cumsum([0, *cuts])
    assert cells == [[c for row in got["top1_shown"] for c in row[a:b]] for a, b in zip(starts, starts[1:])]
    assert [t.split("\n")[0] for t in ticks] == got["tokens_shown"]
    assert "␣" in got["tokens_shown"] and "⟨E3⟩" in got["tokens_shown"]   # ' ' and the bytes of 】
    assert not [t for t in cells + ticks if "\ufffd" in t or "\\x" in t or "\\u" in t]
    assert all(float(y).is_integer() for y in yticks)


def test_tug_of_war_counts_layers_in_whole_numbers():
    import matplotlib.pyplot as plt

    L = 3  # matplotlib's own ticks would be 0, 0.5, ..., 3
    numbers = {"n_layers": L, "model": "m", "positions": 3}
    for metric in ("rank", "logprob"):
        for which in lens.WHICH:
            for stat in ("median", "q1", "q3"):
                numbers[f"{metric}_{which}_{stat}"] = list(np.linspace(1, 10, L + 1))
    fig, _ = tour.tug_of_war(numbers)
    try:
        fig.canvas.draw()
        for ax in fig.axes:
            assert all(float(x).is_integer() for x in ax.get_xticks())
    finally:
        plt.close(fig)


def test_shares_panel_and_regime_table_on_known_labels():
    import matplotlib.pyplot as plt

    # L = 2, one sentence of T = 6 (analysed positions t = 1..4)
    labels = torch.tensor([[0, 1, 1, 1, 1, 0],
                           [0, 0, 0, 2, 1, 0],
                           [0, 2, 2, 2, 0, 0]])
    entry = {"info": SimpleNamespace(n_layers=2), "sentences": [{"labels": labels}]}
    fig, shares = tour.shares_panel({"m": entry})
    plt.close(fig)
    s = shares["m"]
    assert s["positions"] == 4
    assert s["input"] == [1.0, 0.25, 0.0] and s["next"] == [0.0, 0.25, 0.75] and s["other"] == [0.0, 0.5, 0.25]
    row = tour.regime_table(shares).loc["m"]
    assert row["max input @ l≥1"] == 0.25 and row["last l with input ≥ 0.5"] == 0
    assert row["first l with next > input"] == 2 and row["layers with input+next < 0.5"] == 0
    assert row["longest run of them"] == "none" and row["next @ l=L"] == 0.75


def test_longest_run():
    assert tour._longest_run([1, 3, 4, 5, 7, 8]) == (3, 5)
    assert tour._longest_run([2]) == (2, 2) and tour._longest_run([]) is None


def test_sentence_explorer_draws_the_readers_sentence_and_names_bad_input(tiny_llama, monkeypatch, capsys):
    import ipywidgets

    explorer = tour.SentenceExplorer({"tiny": tiny_llama}, max_tokens=30)
    figs, numbers = explorer.draw("Hello there, reader.", "tiny")
    assert numbers["sentences"][0]["sentence"] == "Hello there, reader." and all(f.axes for f in figs.values())
    with pytest.raises(ValueError, match="type a sentence"):
        explorer.draw("   ", "tiny")
    with pytest.raises(ValueError, match="choose one of tiny"):
        explorer.draw("Hi", "other")
    with pytest.raises(ValueError, match="shorten it"):
        explorer.draw("x" * 40, "tiny")
    monkeypatch.setenv("RESIDSHIFT_HEADLESS", "1")
    assert tour.sentence_explorer({"tiny": tiny_llama}) is None  # headless runs: the default sentences only
    box = explorer.widget("A first try.")  # what a Jupyter frontend gets
    assert isinstance(box, ipywidgets.VBox)
    text, menu = box.children[0].children
    assert text.value == "A first try." and list(menu.options) == ["tiny"]
    text.value = ""  # redraws: says what to do instead of raising (outside a kernel, on stdout)
    assert "type a sentence" in capsys.readouterr().out


# --------------------------------------------------------------------------------------------
# Tables that replace the closing sentences: the tie check (00), the regimes per layer (02)
# --------------------------------------------------------------------------------------------


def test_tie_table_reads_both_checks_and_refuses_an_untied_study_model():
    rows = [{"name": "a", "tied_same_tensor": True, "write_probe_diff": 0.0, "decoder": "tied",
             "head_vs_embedding_rel_dist": 0.0, "head_vs_embedding_row_cos": 1.0},
            {"name": "c", "tied_same_tensor": False, "write_probe_diff": 1.0, "decoder": "output",
             "head_vs_embedding_rel_dist": 0.0746, "head_vs_embedding_row_cos": 0.99719}]
    models_table = pd.DataFrame(rows).set_index("name")
    table = tour.tie_table(models_table, tied=["a"])
    assert table.loc["a", "one tensor"] and not table.loc["c", "one tensor"]
    assert table.loc["c", "lens reads"] == "output" and table.loc["c", "head vs embedding (rel. Frobenius)"] == 0.0746
    assert table.loc["c", "mean row cosine"] == 0.99719 and table.loc["a", "write probe diff"] == 0.0
    with pytest.raises(AssertionError, match="c must tie its embeddings"):
        tour.tie_table(models_table, tied=["a", "c"])
    copy = models_table.assign(write_probe_diff=[1.0, 1.0])   # same storage claimed, but a write does not show
    with pytest.raises(AssertionError, match="a must tie"):
        tour.tie_table(copy, tied=["a"])


def test_regime_table_on_hand_made_shares():
    shares = {
        # L = 4, 10 positions: input gone above layer 0, next outnumbers it from layer 1, quiet 1..3
        "s": {"n_layers": 4, "positions": 10, "input": [0.8, 0.0, 0.0, 0.0, 0.0], "next": [0.0, 0.1, 0.1, 0.2, 0.6]},
        # input survives to layer 2 (0.4 at layer 1), next only wins at the top, no quiet layer
        "g": {"n_layers": 4, "positions": 10, "input": [1.0, 0.4, 0.6, 0.5, 0.0], "next": [0.0, 0.2, 0.0, 0.1, 0.7]},
        # next never outnumbers input, and is 0 at the last layer
        "n": {"n_layers": 3, "positions": 8, "input": [1.0, 0.25, 0.125, 0.125], "next": [0.0, 0.0, 0.125, 0.0]},
    }
    table = tour.regime_table(shares)
    assert table.loc["s", "input @ l=0"] == 0.8 and table.loc["s", "max input @ l≥1"] == 0.0
    assert table.loc["g", "max input @ l≥1"] == 0.6 and table.loc["g", "last l with input ≥ 0.5"] == 3
    assert table.loc["s", "longest run of them"] == "1..3" and table.loc["g", "longest run of them"] == "none"
    assert table.loc["n", "longest run of them"] == "1..2" and table.loc["s", "layers with input+next < 0.5"] == 3
    assert table.loc["s", "first l with next > input"] == 1 and table.loc["g", "first l with next > input"] == 4
    assert pd.isna(table.loc["n", "first l with next > input"])
    assert table.loc["s", "first l with next ≥ half of it"] == 4    # 0.2 < 0.3 at layer 3
    assert table.loc["g", "first l with next ≥ half of it"] == 4    # 0.2 < 0.35 at layer 1
    assert pd.isna(table.loc["n", "first l with next ≥ half of it"])  # no next token at the last layer


# --------------------------------------------------------------------------------------------
# 01: one curve, three answers; block 0's write
# --------------------------------------------------------------------------------------------


def _sentence(loaded, text="The cat sat on the mat, and the dog sat on the log."):
    lm, tok, info = loaded
    ids = lens.encode(tok, info, text)
    return info, forward.collect_residuals(lm, info, ids), ids


def _same(value, expected):
    """A depth as curve_numbers stores it (rounded to 3 places; None: never) against a float."""
    if expected is None:
        return value is None
    return value is not None and value["layer"] == pytest.approx(expected, abs=1e-3)


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3"])
def test_one_curve_marks_notebook_03s_three_depths(tiny, name):
    import matplotlib.pyplot as plt
    from residshift.analysis import stats

    info, hs, ids = _sentence(tiny[name])
    num = tour.curve_numbers(info, hs, ids, model=name, sentence="s", n_boot=20, seed=0)
    ref = lens.reference_metrics(info, hs, ids)          # the oracle's per-position columns [L+1, 1, P]
    for metric in tour.ONE_CURVE_METRICS:
        a, b = (ref[f"{metric}_{w}"][:, 0].double().mean(1).numpy() for w in lens.WHICH)
        entry = num["metrics"][metric]
        assert entry["input"] == pytest.approx(a.tolist(), abs=1e-5)
        emergence = stats.halfway_point(b[1:])            # C1.depth: half-way from h_1 to h_L
        assert _same(entry["fade"], stats.halfway_point(a))
        assert _same(entry["crossing"], stats.crossing_point(a, b, orientation=lens.ORIENTATION[metric]))
        assert _same(entry["emergence"], None if emergence is None else emergence + 1)
        for kind in tour.DEPTH_KINDS:
            e = entry[kind]
            assert e is None or e["l/L"] == pytest.approx(e["layer"] / info.n_layers, abs=1e-3)
    fig, numbers = tour.one_curve({name: num})
    assert numbers[name]["depths"]["metric"] == "top1"
    for ax, metric in zip(fig.axes, tour.ONE_CURVE_METRICS):
        marked = sorted(ln.get_xdata()[0] for ln in ax.get_lines() if len(set(ln.get_xdata())) == 1)
        expected = sorted(num["metrics"][metric][k]["layer"] for k in tour.DEPTH_KINDS if num["metrics"][metric][k])
        assert marked == pytest.approx(expected)
        texts = " ".join(t.get_text() for t in ax.texts)
        assert all(tour.DEPTH_LABEL[k] in texts for k in tour.DEPTH_KINDS if num["metrics"][metric][k])
    plt.close(fig)
    assert json_ready(numbers) == numbers


def test_one_curve_draws_a_marker_per_event_with_its_label_on_hand_made_depths():
    import matplotlib.pyplot as plt

    depth = lambda x: {"layer": x, "l/L": x / 4, "lo": None, "hi": None}  # noqa: E731
    entry = {"input": [0, 1, 2, 3, 3], "next": [3, 2, 2, 1, 0], "fade": depth(1.5), "crossing": depth(1.0),
             "emergence": None}
    num = {"n_layers": 4, "positions": 3, "metrics": {"logrank": entry, "top1": {**entry, "emergence": depth(3.5)}}}
    fig, numbers = tour.one_curve({"m": num})
    left, right = fig.axes[:2]
    assert sorted(ln.get_xdata()[0] for ln in left.get_lines() if len(set(ln.get_xdata())) == 1) == [1.0, 1.5]
    assert any("next-token emergence\n3.5 (0.88)" == t.get_text() for t in right.texts)
    assert left.yaxis_inverted() and not right.yaxis_inverted()      # rank: up = more aligned
    assert numbers["m"]["depths"] == {"metric": "top1", "fade": depth(1.5), "crossing": depth(1.0),
                                      "emergence": depth(3.5)}
    plt.close(fig)
    with pytest.raises(ValueError, match="at least one model"):
        tour.one_curve({})


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3"])
def test_block0_write_equals_plain_torch_norms(tiny, name):
    info, hs, ids = _sentence(tiny[name])
    lm = tiny[name][0]
    with torch.no_grad():                                 # plain torch: the module's own hidden states
        states = lm._module(ids, output_hidden_states=True).hidden_states
    h0, h1 = states[0][0, 1:-1].double(), states[1][0, 1:-1].double()
    w = tour.block0_write(hs)
    assert w["positions"] == ids.shape[1] - 2
    n0 = h0.norm(dim=-1)
    assert w["relative write"] == pytest.approx(float(((h1 - h0).norm(dim=-1) / n0).median()), abs=1e-3)
    assert w["norm ratio"] == pytest.approx(float((h1.norm(dim=-1) / n0).median()), abs=1e-3)
    assert w["cos(h_0, h_1)"] == pytest.approx(float(F.cosine_similarity(h0, h1, dim=-1).median()), abs=1e-3)
    with pytest.raises(ValueError, match=r"\[L\+1, 1, T, d\]"):
        tour.block0_write(hs[:, :, :2])


def test_block0_table_puts_the_write_and_both_ranks_in_columns():
    def num(cross, ranks=(1, 115, 20000, 20)):
        return {"n_layers": 30, "block 0 write": {"positions": 12, "relative write": 3.2, "norm ratio": 3.4,
                                                  "cos(h_0, h_1)": 0.3},
                "median rank": {"input": {"layer 0": ranks[0], "layer 1": ranks[1]},
                                "next": {"layer 0": ranks[2], "layer 1": ranks[3]}},
                "rank crossing (medians)": cross}
    table = tour.block0_table({"a": num({"layer": 0.99, "relative depth": 0.03}), "c": num(None)})
    a = table.loc["a"]
    assert a["L"] == 30 and a["positions"] == 12 and a["|h_1 - h_0| / |h_0|"] == 3.2 and a["|h_1| / |h_0|"] == 3.4
    assert a["cos(h_0, h_1)"] == 0.3 and a["rank input @ l=0"] == 1 and a["rank input @ l=1"] == 115
    assert a["rank next @ l=0"] == 20000 and a["rank next @ l=1"] == 20 and a["rank crossing (layer)"] == 0.99
    assert pd.isna(table.loc["c", "rank crossing (layer)"])
