import pytest

from residshift.core import profiles


def test_profiles_share_their_keys():
    keys = {name: set(values) for name, values in profiles.PROFILES.items()}
    assert set(keys) == {"smoke", "default", "paper"}
    assert keys["smoke"] == keys["default"] == keys["paper"]


def test_resolve_fills_none_from_the_profile():
    p = profiles.resolve("smoke", seed=None, ppl_windows=9)
    assert p.seed == profiles.get("smoke")["seed"] and p.ppl_windows == 9 and p.profile == "smoke"
    with pytest.raises(KeyError, match="not in profile"):
        profiles.resolve("smoke", no_such_parameter=1)


def test_smoke_uses_only_in_process_models():
    from residshift.core.models import TINY

    assert set(profiles.get("smoke")["models"]) <= set(TINY)


def test_a_key_in_two_sections_is_rejected(monkeypatch):
    sections = {k: v for k, v in profiles.SECTIONS.items()}
    sections["clash"] = {p: {"seed": 1} for p in profiles.PROFILE_NAMES}
    monkeypatch.setattr(profiles, "SECTIONS", sections)
    with pytest.raises(ValueError, match="seed"):
        profiles._build()


def test_resolve_takes_the_injected_profile_key_and_stays_strict():
    by_name = profiles.resolve(profile="smoke", seed=3, models=None)
    assert by_name.profile == "smoke" and by_name.seed == 3
    assert by_name.models == profiles.get("smoke")["models"]
    assert vars(profiles.resolve("smoke", profile="smoke")) == vars(profiles.resolve("smoke"))
    with pytest.raises(ValueError, match="two profiles"):
        profiles.resolve("smoke", profile="paper")
    with pytest.raises(KeyError, match="not in profile"):
        profiles.resolve(profile="smoke", tuned_stepz=4)
    with pytest.raises(TypeError, match="profile name"):
        profiles.resolve(seed=1)


def test_unknown_profile_is_one_readable_line():
    with pytest.raises(KeyError) as err:
        profiles.resolve("nope")
    text = str(err.value)
    assert text == "unknown profile 'nope'; choose one of smoke, default, paper"


def test_from_namespace_takes_the_declared_keys_only():
    from residshift.core import profiles

    P = profiles.from_namespace({"profile": "smoke", "seed": 3, "models": None, "x": 1, "_": None})
    assert P.seed == 3 and P.models == profiles.get("smoke")["models"] and not hasattr(P, "x")
    import pytest
    with pytest.raises(KeyError, match="parameters cell"):
        profiles.from_namespace({"seed": 1})
