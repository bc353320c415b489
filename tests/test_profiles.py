"""helpers.profiles: profile defaults, explicit knobs win, clear errors."""

import pytest

from helpers.profiles import NOTEBOOK_PROFILES, PROFILE_NAMES, ProfileError, pick_profile, resolve_settings


def test_every_notebook_defines_every_profile_with_the_same_knobs():
    for notebook, profiles in NOTEBOOK_PROFILES.items():
        assert set(profiles) == set(PROFILE_NAMES), notebook
        keys = [set(v) for v in profiles.values()]
        assert all(k == keys[0] for k in keys), f"{notebook}: profiles disagree on knobs"


def test_explicit_knob_wins_and_none_keeps_the_default(capsys):
    s = resolve_settings("harness_smoke", "tiny", episodes=7, dataset_name=None)
    assert s.profile == "tiny" and s.episodes == 7 and s.dataset_name == "chain_sum"
    out = capsys.readouterr().out
    assert "PROFILE = 'tiny'" in out and "episodes" in out  # resolved settings are printed


def test_unset_profile_follows_the_hardware():
    import torch

    assert pick_profile(None) == ("gpu" if torch.cuda.is_available() else "cpu")


def test_bad_profile_and_bad_knob_are_named():
    with pytest.raises(ProfileError, match="'fast'.*tiny"):
        resolve_settings("harness_smoke", "fast")
    with pytest.raises(ProfileError, match="episdoes"):
        resolve_settings("harness_smoke", "tiny", episdoes=3)
