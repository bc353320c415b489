"""Publishing (helpers.reporting.publish), the trackio Space check (helpers.reporting.tracking), Colab secrets (helpers.secrets) and
notebook 02's teacher choice, with the Hugging Face Hub API replaced by fakes: no network is touched."""

import sys
import types

import httpx2
import huggingface_hub
from huggingface_hub import constants as hf_constants
import pytest
from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError

from helpers.reporting.publish import PublishError, check_can_publish, hub_token, publish
from helpers.secrets import secret_to_env
from helpers.chain_sum.sft_data import choose_teacher
from helpers.reporting.tracking import TrackingError, check_trackio_space

URL = "https://huggingface.co/api/whoami-v2"


def _http_error(status, cls=HfHubHTTPError):
    return cls(f"{status} error", response=httpx2.Response(status, request=httpx2.Request("GET", URL)))


@pytest.fixture
def no_login(monkeypatch, tmp_path):
    """No HF_TOKEN, no stored login, not on Colab."""
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setattr(hf_constants, "HF_TOKEN_PATH", str(tmp_path / "hf" / "token"))
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)


class FakeApi:
    """Records what the helpers ask the Hub; `fail` is raised by every call."""

    calls: list = []
    fail: Exception | None = None
    user = "someone"

    def __init__(self, token=None, **_):
        self.token = token

    def _call(self, name, **kwargs):
        FakeApi.calls.append((name, {"token": self.token, **kwargs}))
        if FakeApi.fail:
            raise FakeApi.fail

    def whoami(self, token=None):
        self._call("whoami", passed=token)
        return {"name": FakeApi.user}

    def create_repo(self, repo_id, **kwargs):
        self._call("create_repo", repo_id=repo_id, **kwargs)
        return types.SimpleNamespace(repo_id=repo_id if "/" in repo_id else f"{FakeApi.user}/{repo_id}")

    def upload_folder(self, **kwargs):
        self._call("upload_folder", **kwargs)

    def space_info(self, space_id):
        self._call("space_info", space_id=space_id)


@pytest.fixture
def hub(monkeypatch):
    FakeApi.calls, FakeApi.fail = [], None
    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    return FakeApi


class FakeTrainer:

    def save_model(self, folder):
        from pathlib import Path

        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / "model.safetensors").write_text("weights")


class FakeTokenizer:
    def save_pretrained(self, folder):
        (__import__("pathlib").Path(folder) / "tokenizer.json").write_text("{}")


def test_token_comes_from_hf_token_else_none(no_login, monkeypatch):
    assert hub_token() is None
    monkeypatch.setenv("HF_TOKEN", "hf_from_env")
    assert hub_token() == "hf_from_env"


def test_check_before_training_needs_a_repo_id_and_a_token(no_login, hub, capsys):
    check_can_publish(False, None)  # not publishing: nothing to check
    with pytest.raises(PublishError, match="needs HUB_MODEL_ID"):
        check_can_publish(True, None)
    with pytest.raises(PublishError, match="no Hugging Face token.*notebook_login"):
        check_can_publish(True, "someone/model")
    assert hub.calls == []


def test_check_before_training_asks_the_hub_and_stops_only_on_a_refused_token(no_login, hub, monkeypatch, capsys):
    monkeypatch.setenv("HF_TOKEN", "hf_x")
    check_can_publish(True, "someone/model")
    assert "Will push to https://huggingface.co/someone/model as someone" in capsys.readouterr().out
    assert hub.calls[0][0] == "whoami" and hub.calls[0][1]["passed"] == "hf_x"
    hub.fail = _http_error(401)
    with pytest.raises(PublishError, match="refused the token"):
        check_can_publish(True, "someone/model")
    hub.fail = httpx2.ConnectError("[Errno -2] Name or service not known")
    check_can_publish(True, "someone/model")  # unreachable: reported, training goes on
    assert "not reachable (ConnectError)" in capsys.readouterr().out


def test_publish_saves_then_uploads_that_folder_to_the_repo_id(no_login, hub, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("HF_TOKEN", "hf_x")
    result = publish(FakeTrainer(), FakeTokenizer(), tmp_path / "model", push=True, repo_id="someone/wordle",
                     commit_message="GRPO on Wordle")
    assert result == {"saved_to": str(tmp_path / "model"), "merged_to": None, "pushed_to": "someone/wordle",
                      "push_error": None}
    assert [name for name, _ in hub.calls] == ["create_repo", "upload_folder"]
    assert hub.calls[0][1] == {"token": "hf_x", "repo_id": "someone/wordle", "repo_type": "model", "exist_ok": True}
    assert hub.calls[1][1] == {"token": "hf_x", "repo_id": "someone/wordle", "folder_path": str(tmp_path / "model"),
                               "commit_message": "GRPO on Wordle"}
    assert (tmp_path / "model" / "tokenizer.json").exists()
    assert "pushed to https://huggingface.co/someone/wordle" in capsys.readouterr().out


def test_publish_never_raises_for_the_hub(no_login, hub, monkeypatch, tmp_path):
    saved = publish(FakeTrainer(), FakeTokenizer(), tmp_path / "a", push=False, repo_id="someone/m")
    assert saved["pushed_to"] is None and saved["push_error"] is None and hub.calls == []
    assert "no Hugging Face token" in publish(FakeTrainer(), FakeTokenizer(), tmp_path / "b", push=True,
                                              repo_id="someone/m")["push_error"]
    monkeypatch.setenv("HF_TOKEN", "hf_x")
    assert "no repository id" in publish(FakeTrainer(), FakeTokenizer(), tmp_path / "c", push=True)["push_error"]
    hub.fail = httpx2.ConnectError("[Errno -2] Name or service not known")
    failed = publish(FakeTrainer(), FakeTokenizer(), tmp_path / "d", push=True, repo_id="someone/m")
    assert failed["pushed_to"] is None and failed["push_error"].startswith("ConnectError")
    assert (tmp_path / "d" / "model.safetensors").exists()  # the local copy is the result
    # only the main process uploads under accelerate launch: tests/test_scale_out.py (two real processes)


def test_merged_saves_a_plain_model_beside_the_adapter_and_pushes_it(no_login, hub, monkeypatch, tmp_path, capsys):
    """SAVE_MERGED with LoRA: the adapter folder as before, plus `<folder>-merged`, a plain transformers model with
    the same outputs, which is what gets pushed. Without an adapter there is nothing to merge, and it says so."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from helpers.models import load_policy
    from helpers.model_folders import resolve_model

    model = load_policy("tiny", device="cpu", lora=True)
    with torch.no_grad():   # lora_B starts at zero: move it, so merging has something to fold in
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05, generator=torch.Generator().manual_seed(0))
    model.eval()
    ids = torch.randint(0, 1000, (1, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits = model(input_ids=ids).logits

    class AdapterTrainer:   # what a TRL trainer's save_model does with a peft model
        def save_model(self, folder):
            model.save_pretrained(folder)

    monkeypatch.setenv("HF_TOKEN", "hf_x")
    tokenizer = AutoTokenizer.from_pretrained(resolve_model("tiny"))
    result = publish(AdapterTrainer(), tokenizer, tmp_path / "model", push=True, repo_id="someone/m", merged=True)
    assert result["merged_to"] == str(tmp_path / "model-merged")
    assert hub.calls[-1][1]["folder_path"] == result["merged_to"]   # the plain model is the one pushed
    assert (tmp_path / "model" / "adapter_config.json").exists()
    assert not (tmp_path / "model-merged" / "adapter_config.json").exists()
    plain = AutoModelForCausalLM.from_pretrained(result["merged_to"]).eval()
    assert not any("lora_" in name for name, _ in plain.named_parameters())
    with torch.no_grad():
        assert torch.allclose(plain(input_ids=ids).logits, logits, atol=1e-4)
    assert "merged model (adapter folded into the base" in capsys.readouterr().out

    plain_run = publish(FakeTrainer(), FakeTokenizer(), tmp_path / "full", merged=True)
    assert plain_run["merged_to"] is None and not (tmp_path / "full-merged").exists()
    assert "no LoRA adapter to merge" in capsys.readouterr().out


def test_trackio_space_problems_are_reported_in_our_words(no_login, hub, monkeypatch, capsys):
    check_trackio_space(None)
    check_trackio_space("someone/dash", report_to="none")
    assert "ignored" in capsys.readouterr().out and hub.calls == []
    with pytest.raises(TrackingError, match="needs a Hugging Face token.*TRACKIO_SPACE_ID = None"):
        check_trackio_space("someone/dash")
    monkeypatch.setenv("HF_TOKEN", "hf_x")
    hub.fail = httpx2.ConnectError("[Errno -2] Name or service not known")  # what trackio.init hits offline
    with pytest.raises(TrackingError, match="cannot reach the Space 'someone/dash'.*TRACKIO_SPACE_ID = None"):
        check_trackio_space("someone/dash")
    hub.fail = _http_error(404, RepositoryNotFoundError)
    check_trackio_space("someone/dash")  # a new Space: trackio creates it
    hub.fail = None
    check_trackio_space("someone/dash")
    assert hub.calls[-1] == ("space_info", {"token": "hf_x", "space_id": "someone/dash"})


def _fake_colab(monkeypatch, secrets):
    userdata = types.SimpleNamespace(get=lambda name: secrets[name] if name in secrets else
                                     (_ for _ in ()).throw(KeyError(name)))
    colab = types.ModuleType("google.colab")
    colab.userdata = userdata
    monkeypatch.setitem(sys.modules, "google.colab", colab)


def test_openai_teacher_key_from_a_colab_secret_and_the_choice_is_said(no_login, monkeypatch, capsys):
    import os

    assert choose_teacher("openai") == "local"
    assert "neither in the environment nor a Colab secret" in capsys.readouterr().out
    _fake_colab(monkeypatch, {"OPENAI_API_KEY": "sk-colab"})
    assert choose_teacher("openai") == "openai"
    assert os.environ["OPENAI_API_KEY"] == "sk-colab"  # where `openenv collect` reads it
    out = capsys.readouterr().out
    assert "teacher: openai (OPENAI_API_KEY found" in out and "sk-colab" not in out
    assert choose_teacher("openai", llm_endpoint="http://host:8000/v1") == "endpoint"
    assert choose_teacher("local") == "local"
    monkeypatch.delenv("OPENAI_API_KEY")
    _fake_colab(monkeypatch, {})
    assert secret_to_env("OPENAI_API_KEY") is False
