"""study.alignment.decoder_vs_information_lines: the lens's quiet input layers beside the causal evidence."""
import torch

from residshift.study.alignment import decoder_vs_information_lines


class _Result:
    def __init__(self, rates):
        self.per_seq = {"top1_input": torch.tensor([rates, rates], dtype=torch.float64)}


def _lines(rates, used, guess=0.05):
    evidence = {"m": {"profiled": [1, 2, 3], "input": used, "next": []}}
    return decoder_vs_information_lines(evidence, {"m": _Result(rates)},
                                        {"m": {"top1_input": torch.tensor([guess, guess])}})


def test_used_where_the_lens_decodes_no_input_is_named_with_the_rates():
    (line,) = _lines([1.0, 0.0, 0.01, 0.2, 0.3], used=[1, 2])
    assert "at 2 of the 2 profiled layers" in line and "h_1 (0.000), h_2 (0.010)" in line
    assert "not whether x_t's information is gone" in line


def test_no_use_where_the_lens_is_quiet_reads_as_agreement():
    (line,) = _lines([1.0, 0.0, 0.01, 0.2, 0.3], used=[3])
    assert "at none of the 2 profiled layers" in line and "agree" in line


def test_a_lens_that_decodes_the_input_everywhere_makes_no_comparison():
    (line,) = _lines([1.0, 0.5, 0.5, 0.5, 0.3], used=[1])
    assert "at every profiled layer" in line
