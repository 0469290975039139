"""core.outputs.json_ready: one cleaner for the numbers the notebooks save (lenient) and for verdict
details (strict)."""
import enum
import json
import math

import numpy as np
import pandas as pd
import pytest
import torch

from residshift.core.outputs import NotJSONError, json_ready


@pytest.mark.parametrize("strict", [False, True])
def test_non_finite_floats_become_none(strict):
    values = [float("nan"), float("inf"), float("-inf"), np.float32("nan"), np.float64("-inf"), 1.5, -0.0]
    assert json_ready(values, strict=strict) == [None, None, None, None, None, 1.5, -0.0]
    assert json_ready(float("nan"), strict=strict) is None


@pytest.mark.parametrize("strict", [False, True])
def test_numpy_scalars_and_arrays_become_plain(strict):
    out = json_ready({"f": np.float32(2.5), "i": np.int64(3), "u": np.uint8(7), "b": np.bool_(True),
                      "a": np.array([[1, 2], [3, 4]], dtype=np.int16),
                      "x": np.array([0.5, np.nan, np.inf])}, strict=strict)
    assert out == {"f": 2.5, "i": 3, "u": 7, "b": True, "a": [[1, 2], [3, 4]], "x": [0.5, None, None]}
    assert [type(out[k]) for k in ("f", "i", "u", "b")] == [float, int, int, bool]
    assert type(out["a"][0][0]) is int
    assert json_ready(np.float32(0.1), strict=strict) == float(np.float32(0.1))  # the float32 value, exactly


@pytest.mark.parametrize("strict", [False, True])
def test_torch_tensors_become_lists(strict):
    t = torch.tensor([1.5, float("inf")], requires_grad=True)
    assert json_ready(t, strict=strict) == [1.5, None]
    assert json_ready(torch.tensor(3), strict=strict) == 3 and type(json_ready(torch.tensor(3))) is int
    assert json_ready(torch.tensor([True, False]), strict=strict) == [True, False]
    assert json_ready(torch.tensor([0.5, 2.0], dtype=torch.bfloat16), strict=strict) == [0.5, 2.0]
    assert json_ready(torch.zeros(2, 0), strict=strict) == [[], []]


@pytest.mark.parametrize("strict", [False, True])
def test_containers_keys_and_plain_values(strict):
    out = json_ready({1: (1, (2.0, "s")), "n": None, ("a",): []}, strict=strict)
    assert out == {"1": [1, [2.0, "s"]], "n": None, "('a',)": []}
    assert json_ready((float("-inf"),), strict=strict) == [None]


@pytest.mark.parametrize("strict", [False, True])
def test_bool_stays_bool_and_int_subclasses_become_int(strict):
    class Level(enum.IntEnum):
        LOW = 1

    out = json_ready([True, False, np.bool_(False), 0, Level.LOW], strict=strict)
    assert out == [True, False, False, 0, 1]
    assert [type(v) for v in out] == [bool, bool, bool, int, int]
    assert json.dumps(out) == "[true, false, false, 0, 1]"


def test_dataframes_become_records_and_pandas_na_none():
    frame = pd.DataFrame({"m": ["a", "b"], "x": [1.0, float("nan")],
                          "n": pd.array([3, None], dtype="Int64")}).set_index("m")
    out = json_ready({"f": frame, "na": pd.NA, "g": np.float32(2.5), "nested": [np.int64(3), (float("-inf"),)]})
    assert out["f"] == [{"m": "a", "x": 1.0, "n": 3}, {"m": "b", "x": None, "n": None}]
    assert type(out["f"][0]["n"]) is int and out["na"] is None
    assert out["g"] == 2.5 and out["nested"] == [3, [None]]
    assert json_ready(pd.DataFrame({"v": [1]})) == [{"index": 0, "v": 1}]  # the index comes along


def test_lenient_passes_unknown_types_through():
    marker, s = object(), {1, 2}
    assert json_ready(marker) is marker and json_ready([s])[0] is s
    assert json_ready(np.str_("x")) == "x" and type(json_ready(np.str_("x"))) is str
    assert json_ready(1 + 2j) == 1 + 2j


@pytest.mark.parametrize("bad, name", [(object(), "object"), ({1}, "set"), (pd.NA, "NAType"),
                                       (pd.DataFrame({"v": [1]}), "DataFrame"), (np.complex64(1), "complex64")])
def test_strict_refuses_what_is_not_json_like(bad, name):
    with pytest.raises(NotJSONError, match=f"values must be JSON-like .*; got {name}: convert it first"):
        json_ready({"k": [bad]}, strict=True)
    with pytest.raises(ValueError, match="^details must be JSON-like"):  # also a ValueError (and TypeError)
        json_ready(bad, strict=True, what="details")
    assert issubclass(NotJSONError, TypeError)


def test_output_is_valid_strict_json():
    value = {"a": [np.float64("nan"), torch.tensor([1.0, -math.inf]), np.arange(2)], "b": (True, None)}
    for strict in (False, True):
        assert json.loads(json.dumps(json_ready(value, strict=strict), allow_nan=False)) == {
            "a": [None, [1.0, None], [0, 1]], "b": [True, None]}
