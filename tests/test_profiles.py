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


def test_the_gpu_profile_follows_the_card_and_explicit_knobs_still_win(capsys):
    from helpers.compute.hardware import GPU

    t4, a100 = GPU("Tesla T4", 14.7, (7, 5)), GPU("NVIDIA A100-SXM4-40GB", 39.4, (8, 0))
    on_t4 = resolve_settings("01_grpo_walkthrough", "gpu", gpu=t4)
    assert (on_t4.model, on_t4.lora) == ("Qwen/Qwen3-0.6B", True)
    assert "16gb class" in capsys.readouterr().out
    mine = resolve_settings("01_grpo_walkthrough", "gpu", gpu=t4, model="Qwen/Qwen3-1.7B", quiet=True)
    assert (mine.model, mine.lora) == ("Qwen/Qwen3-1.7B", True)
    full = resolve_settings("01_grpo_walkthrough", "gpu", gpu=a100, quiet=True)
    assert (full.model, full.lora) == (NOTEBOOK_PROFILES["01_grpo_walkthrough"]["gpu"]["model"], False)
    cpu = resolve_settings("01_grpo_walkthrough", "cpu", gpu=t4, quiet=True)   # only the gpu profile follows the card
    assert cpu.model == "smollm2-135m" and cpu.lora is False


def test_lora_multiplies_the_profiles_learning_rates_but_not_the_users():
    from helpers.profiles import LORA_LR_MULTIPLIER

    plain = resolve_settings("04_openreward_spec", "cpu", quiet=True)
    lora = resolve_settings("04_openreward_spec", "cpu", quiet=True, lora=True)
    assert lora.learning_rate == pytest.approx(plain.learning_rate * LORA_LR_MULTIPLIER)
    assert lora.sft_learning_rate == pytest.approx(plain.sft_learning_rate * LORA_LR_MULTIPLIER)
    mine = resolve_settings("04_openreward_spec", "cpu", quiet=True, lora=True, learning_rate=3e-5)
    assert mine.learning_rate == 3e-5 and mine.sft_learning_rate == lora.sft_learning_rate


def test_knobs_come_by_name_a_misspelt_one_is_refused_and_the_set_ones_are_remembered():
    """The settings cell passes each knob by its setting's name; a name that is no setting stops the run, naming the
    one it resembles; `settings.overridden` says which settings a knob set (None leaves the profile's)."""
    settings = resolve_settings("01_grpo_walkthrough", "tiny", quiet=True, max_steps=3, temperature=None)
    assert (settings.max_steps, settings.temperature) == (3, NOTEBOOK_PROFILES["01_grpo_walkthrough"]["tiny"]["temperature"])
    assert settings.overridden == {"max_steps"}
    assert resolve_settings("01_grpo_walkthrough", "tiny", quiet=True).overridden == frozenset()
    with pytest.raises(ProfileError, match=r"\['learnig_rate'\] for 01_grpo_walkthrough \(learnig_rate: did you mean "
                                           r"learning_rate\?\)"):
        resolve_settings("01_grpo_walkthrough", "tiny", learnig_rate=1e-4, quiet=True)
    with pytest.raises(ProfileError, match="'seed'"):   # a knob that is no setting of 01 is not passed at all
        resolve_settings("01_grpo_walkthrough", "tiny", seed=0, quiet=True)


@pytest.mark.parametrize("profile", ["tiny", "cpu", "gpu"])
def test_notebook_01s_dataset_config_follows_its_dataset(profile, capsys):
    """None: the profile's chain_sum difficulty; {}: reasoning_gym's defaults; another dataset with None: {} (the
    profile's difficulty is chain_sum's); another dataset with a config: that config."""
    def config(**knobs):
        return resolve_settings("01_grpo_walkthrough", profile, gpu=None, quiet=True, **knobs).dataset_config

    chain_sum = NOTEBOOK_PROFILES["01_grpo_walkthrough"][profile]["dataset_config"]
    assert chain_sum and config() == chain_sum and config(dataset_name="chain_sum", dataset_config=None) == chain_sum
    assert config(dataset_config={}) == {}
    assert config(dataset_config={"min_terms": 3}) == {"min_terms": 3}
    assert config(dataset_name="letter_counting") == {}
    assert config(dataset_name="letter_counting", dataset_config={"min_words": 5}) == {"min_words": 5}
    capsys.readouterr()
    resolve_settings("01_grpo_walkthrough", profile, gpu=None, dataset_name="letter_counting")
    assert "dataset_name 'letter_counting' is not chain_sum" in capsys.readouterr().out   # said, not silent


def test_a_cpu_without_native_bf16_gets_the_slow_cpu_recipe_and_set_knobs_still_win(monkeypatch, capsys):
    """Notebook 01's cpu profile on an AVX2 laptop: the recipe's `slow_cpu` changes, said in one line; never on a
    CPU with bf16, never in another profile, never over a knob the learner set."""
    from helpers import profiles
    from helpers.recipes import RECIPES

    nb = "01_grpo_walkthrough"
    slow = RECIPES[nb].slow_cpu
    monkeypatch.setattr(profiles, "detect_gpu", lambda: None)
    monkeypatch.setattr(profiles, "cpu_native_bf16", lambda: (False, "the CPU has neither avx512_bf16 nor amx_bf16"))
    settings = resolve_settings(nb, "cpu")
    out = capsys.readouterr().out
    assert all(settings[k] == v for k, v in slow.items()) and "slow-CPU recipe sets" in out and "neither" in out
    assert settings.eval_n != NOTEBOOK_PROFILES[nb]["cpu"]["eval_n"]
    mine = resolve_settings(nb, "cpu", quiet=True, eval_n=900)
    assert mine.eval_n == 900 and mine.freeze_layers == slow["freeze_layers"]
    assert resolve_settings(nb, "tiny", quiet=True).eval_n == NOTEBOOK_PROFILES[nb]["tiny"]["eval_n"]
    monkeypatch.setattr(profiles, "cpu_native_bf16", lambda: (True, "the CPU has avx512_bf16"))
    assert resolve_settings(nb, "cpu", quiet=True) == resolve_settings(nb, "cpu", quiet=True, **{
        k: NOTEBOOK_PROFILES[nb]["cpu"][k] for k in slow})
    assert resolve_settings(nb, "cpu", quiet=True).eval_n == NOTEBOOK_PROFILES[nb]["cpu"]["eval_n"]
