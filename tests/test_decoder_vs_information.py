"""study.alignment.causal_evidence_table: the lens's quiet input layers beside the causal evidence."""
import torch

from residshift.study.alignment import causal_evidence_table


class _Result:
    def __init__(self, rates):
        self.per_seq = {"top1_input": torch.tensor([rates, rates], dtype=torch.float64)}


def _row(rates, used, guess=0.05):
    evidence = {"m": {"profiled": [1, 2, 3], "input": used, "next": []}}
    return causal_evidence_table(evidence, {"m": _Result(rates)},
                                 {"m": {"top1_input": torch.tensor([guess, guess])}}).loc["m"]


def test_used_where_the_lens_decodes_no_input_is_listed():
    row = _row([1.0, 0.0, 0.01, 0.2, 0.3], used=[1, 2])
    assert row["lens input top-1 <= unigram (h_l)"] == "1, 2"
    assert row["input used where the lens is quiet (h_l)"] == "1, 2"
    assert row["unigram input top-1"] == 0.05


def test_no_use_where_the_lens_is_quiet_lists_none():
    row = _row([1.0, 0.0, 0.01, 0.2, 0.3], used=[3])
    assert row["input used (h_l)"] == "3" and row["input used where the lens is quiet (h_l)"] == "none"


def test_a_lens_that_decodes_the_input_everywhere_has_no_quiet_layer():
    row = _row([1.0, 0.5, 0.5, 0.5, 0.3], used=[1])
    assert row["lens input top-1 <= unigram (h_l)"] == "none"
    assert row["input used where the lens is quiet (h_l)"] == "none"
