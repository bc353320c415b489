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


def test_the_parameters_cell_is_read_in_one_call_and_a_misspelt_knob_is_refused(capsys):
    """Every notebook's own parameters cell passes `knobs_in` (no legitimate name is taken for a typo), each of its
    settings arrives by name, keyword knobs win, and a misspelt one stops the run naming the setting it resembles."""
    import json

    from helpers.profiles import knobs_in
    from tools.notebooks import NOTEBOOKS_DIR

    for path in sorted(NOTEBOOKS_DIR.glob("0*.ipynb")):
        cell = next(c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code")
        namespace = {"NOTEBOOK": path.stem}
        exec("".join(cell["source"]), namespace)
        knobs = knobs_in(path.stem, namespace)
        assert knobs and all(namespace[k.upper()] == v for k, v in knobs.items())
    namespace = {"NOTEBOOK": "01_grpo_walkthrough", "MAX_STEPS": 3, "TEMPERATURE": None, "RUNS_DIR": None}
    settings = resolve_settings("01_grpo_walkthrough", "tiny", parameters=namespace, temperature=0.7, quiet=True)
    assert (settings.max_steps, settings.temperature) == (3, 0.7)
    with pytest.raises(ProfileError, match="LEARNIG_RATE is not a setting of 01_grpo_walkthrough: did you mean "
                                           "LEARNING_RATE"):
        resolve_settings("01_grpo_walkthrough", "tiny", parameters={"LEARNIG_RATE": 1e-4}, quiet=True)


def test_more_knobs_a_passed_value_wins_and_a_rerun_takes_the_cells_edit():
    from helpers.profiles import more_knobs

    fresh = {}
    more_knobs(fresh, MAX_TURNS=None, SEED=0)                  # nothing passed: the cell's values
    assert fresh["MAX_TURNS"] is None and fresh["SEED"] == 0
    more_knobs(fresh, MAX_TURNS=4, SEED=0)                     # the learner edits the cell and reruns it
    assert fresh["MAX_TURNS"] == 4
    more_knobs(fresh, MAX_TURNS=6, SEED=1)                     # and again
    assert (fresh["MAX_TURNS"], fresh["SEED"]) == (6, 1)

    passed = {"MAX_TURNS": 9}                                  # papermill's injected cell / the script's flag
    more_knobs(passed, MAX_TURNS=None, SEED=0)
    assert (passed["MAX_TURNS"], passed["SEED"]) == (9, 0)
    more_knobs(passed, MAX_TURNS=2, SEED=0)                    # still passed after a rerun with an edit
    assert passed["MAX_TURNS"] == 9
    passed_none = {"MAX_TURNS": None}                          # None passed on purpose still wins
    more_knobs(passed_none, MAX_TURNS=5)
    assert passed_none["MAX_TURNS"] is None

    with pytest.raises(ProfileError, match="UPPERCASE"):
        more_knobs({}, max_turns=3)


def test_more_knobs_reach_resolve_settings_like_the_parameters_cell():
    from helpers.profiles import more_knobs

    namespace = {"PROFILE": "cpu", "MAX_STEPS": None}
    more_knobs(namespace, NUM_GENERATIONS=None, SEED=0, BATCH_SIZE=None)
    default = resolve_settings("04_openreward_spec", "cpu", quiet=True, parameters=namespace)
    assert default == resolve_settings("04_openreward_spec", "cpu", quiet=True)
    namespace["BATCH_SIZE"] = 4                                # as if passed: -p BATCH_SIZE 4
    more_knobs(namespace, NUM_GENERATIONS=None, SEED=0, BATCH_SIZE=None)
    assert resolve_settings("04_openreward_spec", "cpu", quiet=True, parameters=namespace).batch_size == 4


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
