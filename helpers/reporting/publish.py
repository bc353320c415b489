"""Publishing to the Hugging Face Hub, the same way in every notebook.

    check_can_publish(PUSH_TO_HUB, HUB_MODEL_ID)     # before training: stop now, not after hours
    publish(trainer, tokenizer, out_dir / "model", push=PUSH_TO_HUB, repo_id=HUB_MODEL_ID, merged=SAVE_MERGED)

The token is huggingface_hub.get_token()'s: HF_TOKEN, `hf auth login` / notebook_login(), or the Colab
secret HF_TOKEN. The model is always saved locally first; a push that fails after training (offline,
refused) is reported, never raised, so a finished run is never lost to the Hub.
"""

from __future__ import annotations

from pathlib import Path

from helpers.compute.processes import on_main
from helpers.models import load_policy, save_policy

HOW_TO_LOG_IN = ("log in with `from huggingface_hub import notebook_login; notebook_login()` or `hf auth login`, "
                 "add a Colab secret named HF_TOKEN, or set the HF_TOKEN environment variable")


class PublishError(ValueError):
    """PUSH_TO_HUB cannot work (no repository id, no token, a refused token); the message says what to set."""


def hub_token() -> str | None:
    """The Hugging Face token (HF_TOKEN, a stored login, or a Colab secret), else None."""
    try:
        from huggingface_hub import get_token

        return get_token()
    except Exception:  # an old or broken huggingface_hub: treat as no token
        return None


def check_can_publish(push: bool, repo_id: str | None, *, knob: str = "HUB_MODEL_ID") -> None:
    """Before training: raise PublishError unless a push to `repo_id` can work. Does nothing when not `push`.

    An unreachable Hub is only reported here: the push at the end will say again, and the model is saved
    locally either way. A token the Hub refuses (HTTP 401) stops the run.
    """
    if not push:
        return
    if not repo_id:
        raise PublishError(f"PUSH_TO_HUB=True needs {knob}, e.g. 'your-name/my-model'; or set PUSH_TO_HUB=False.")
    token = hub_token()
    if not token:
        raise PublishError(f"PUSH_TO_HUB=True, but there is no Hugging Face token: {HOW_TO_LOG_IN}. "
                           "Or set PUSH_TO_HUB=False.")
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    try:
        user = HfApi().whoami(token=token)["name"]
    except HfHubHTTPError as exc:
        if exc.response is not None and exc.response.status_code == 401:
            raise PublishError(f"PUSH_TO_HUB=True, but the Hub refused the token ({exc}): {HOW_TO_LOG_IN} "
                               "with a token that has write access.") from exc
        print(f"Could not check the Hugging Face token ({type(exc).__name__}); training goes on and the push at the "
              "end may fail: the model is saved locally either way.")
        return
    except Exception as exc:  # offline, DNS, timeouts
        print(f"The Hugging Face Hub is not reachable ({type(exc).__name__}); training goes on and the push at the "
              "end may fail: the model is saved locally either way.")
        return
    print(f"Will push to https://huggingface.co/{repo_id} as {user}.")


def publish(trainer, tokenizer, local_dir, *, push: bool = False, repo_id: str | None = None,
            commit_message: str = "Upload fine-tuned model", merged: bool = False) -> dict:
    """Save the trained model to `local_dir`; upload it to `repo_id` when `push` and a token exists.

    A LoRA run saves its adapter there. With `merged` it also saves a plain model, the adapter folded into the
    base weights (`<local_dir>-merged`, loads with transformers alone), built from the saved adapter on the CPU
    so the trained model and the GPU are left as they are; that folder is the one pushed.
    Returns {"saved_to", "merged_to", "pushed_to", "push_error"} and prints one line about each. Never raises
    because of the Hub. Under `accelerate launch` every process calls it (saving gathers the weights), the main
    process writes the files and uploads, and every process returns its result.
    """
    trainer.save_model(str(local_dir))   # Trainer writes from the main process only
    return on_main(_finish_publish, tokenizer, local_dir, push=push, repo_id=repo_id, commit_message=commit_message,
                   merged=merged)


def _finish_publish(tokenizer, local_dir, *, push: bool, repo_id: str | None, commit_message: str,
                    merged: bool) -> dict:
    tokenizer.save_pretrained(str(local_dir))
    result = {"saved_to": str(local_dir), "merged_to": None, "pushed_to": None, "push_error": None}
    print("saved to", local_dir)
    if merged and (Path(local_dir) / "adapter_config.json").exists():
        merged_dir = Path(local_dir).with_name(Path(local_dir).name + "-merged")
        save_policy(load_policy(str(local_dir), device="cpu"), tokenizer, merged_dir, merged=True)
        result["merged_to"] = str(merged_dir)
        print("merged model (adapter folded into the base, no peft needed) saved to", merged_dir)
    elif merged:
        print("SAVE_MERGED: no LoRA adapter to merge; the model above is already a plain one")
    if not push:
        return result
    folder = result["merged_to"] or str(local_dir)
    token = hub_token()
    if not repo_id:
        result["push_error"] = "no repository id (set HUB_MODEL_ID, e.g. 'your-name/my-model')"
    elif not token:
        result["push_error"] = f"no Hugging Face token ({HOW_TO_LOG_IN})"
    else:
        try:
            from huggingface_hub import HfApi

            api = HfApi(token=token)
            repo = api.create_repo(repo_id, repo_type="model", exist_ok=True)
            api.upload_folder(repo_id=repo.repo_id, folder_path=folder, commit_message=commit_message)
            result["pushed_to"] = repo.repo_id
        except Exception as exc:  # offline, no permission, rate-limited: the local copy is still there
            result["push_error"] = f"{type(exc).__name__}: {exc}"
    if result["pushed_to"]:
        print(f"pushed to https://huggingface.co/{result['pushed_to']}")
    else:
        print("not pushed:", result["push_error"], "(the local copy above is the result)")
    return result
