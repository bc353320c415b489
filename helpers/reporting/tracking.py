"""Where training logs: trackio checked before training, and the I/O fields every trainer config shares.

    check_trackio_space(TRACKIO_SPACE_ID, settings.report_to)   # can trackio mirror to that Space? say so now
    GRPOConfig(**trainer_io(NOTEBOOK, "trainer", settings, precision, seed=SEED), learning_rate=...)

Without the check, trackio fails only when training starts, with a raw network or Hub error
(offline: `httpx.ConnectError` from `space_info`). No Space (None) keeps the dashboard local.

The same call keeps trackio's local dashboard out of the notebook (`no_dashboard_in_cell`).
"""

from __future__ import annotations

import functools

from helpers.reporting.publish import HOW_TO_LOG_IN, hub_token
from helpers.runs import run_dir


class TrackingError(RuntimeError):
    """TRACKIO_SPACE_ID cannot work here; the message says what failed and what to set."""


def no_dashboard_in_cell() -> None:
    """Make the trainer's `trackio.init` print `trackio show --project ...` instead of embedding the dashboard.

    In a notebook, trackio.init (which the trainer calls with no `embed` argument) starts a dashboard server in
    the kernel and shows it in an iframe whose URL carries that server's write token: saved with the notebook,
    the token travels with the file, and a static page shows a blank 1000-pixel frame. `embed=False` does
    neither; the metrics are logged the same way.
    """
    import trackio

    if not isinstance(trackio.init, functools.partial):
        trackio.init = functools.partial(trackio.init, embed=False)


def check_trackio_space(space_id: str | None, report_to="trackio") -> None:
    """Raise TrackingError unless trackio can reach (or create) the Space `space_id`. None: nothing to check.
    When trackio logs, keep its dashboard (and its write token) out of the notebook's outputs."""
    if "trackio" in str(report_to):
        no_dashboard_in_cell()
    if not space_id:
        return
    if "trackio" not in str(report_to):
        print(f"TRACKIO_SPACE_ID={space_id!r} is ignored: REPORT_TO is {report_to!r}, not 'trackio'.")
        return
    local = "Set TRACKIO_SPACE_ID = None to keep the dashboard local (`trackio show` opens it)"
    token = hub_token()
    if not token:
        raise TrackingError(f"TRACKIO_SPACE_ID={space_id!r} needs a Hugging Face token (trackio creates and writes "
                            f"the Space): {HOW_TO_LOG_IN}. {local}.")
    from huggingface_hub import HfApi
    from huggingface_hub.errors import RepositoryNotFoundError

    try:
        HfApi(token=token).space_info(space_id)
    except RepositoryNotFoundError:
        return  # trackio creates it
    except Exception as exc:
        raise TrackingError(f"trackio cannot reach the Space {space_id!r} on the Hugging Face Hub "
                            f"({type(exc).__name__}: {exc}). {local}, or check the network and the token.") from exc


PROJECT = "agent-rl-notebooks"   # one trackio project: every notebook's runs side by side in one dashboard


def trainer_io(notebook: str, name: str, settings, precision, *, trackio_space_id=None, seed: int = 0,
               **overrides) -> dict:
    """The fields every trainer config of a notebook shares and no lesson is about, so the config in the notebook
    shows only its learning knobs: where the trainer writes (runs/<notebook>/<name>), how it logs (one trackio
    project, the profile's `report_to`, every step), no checkpoints, the precision and device `choose_precision`
    picked, no push (helpers.reporting.publish pushes). `overrides` win. The recipe's knobs (activation
    checkpointing included) are the config cell's to show.

        GRPOConfig(**trainer_io(NOTEBOOK, "trainer", settings, precision, seed=SEED), learning_rate=..., ...)
    """
    fields = dict(output_dir=str(run_dir(notebook) / name), run_name=f"{notebook}-{name}-{settings.profile}",
                  project=PROJECT, report_to=settings.report_to, trackio_space_id=trackio_space_id, logging_steps=1,
                  save_strategy="no", seed=seed, use_cpu=precision.device == "cpu", bf16=precision.bf16,
                  fp16=precision.fp16, push_to_hub=False)
    return {**fields, **overrides}
