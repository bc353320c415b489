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


def test_warm_started_cpu_profiles_leave_room_for_the_checkpoints_working():
    """Notebook 02's checkpoint writes its column-by-column working before the tool call (up to ~95 tokens on
    two-term sums; notebook 01's cpu profile sizes its rollouts for that). A notebook that warm-starts from it
    and generates fewer tokens cuts the call off: notebook 04 once evaluated with 64 and saw 3 % of replies
    answer (100 % with 128)."""
    needed = NOTEBOOK_PROFILES["01_grpo_walkthrough"]["cpu"]["max_completion_length"]
    nb04 = NOTEBOOK_PROFILES["04_openreward_spec"]["cpu"]
    assert nb04["warm_start"]
    assert nb04["max_completion_length"] >= needed and nb04["eval_max_new_tokens"] >= needed
