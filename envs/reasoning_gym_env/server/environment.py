"""The reasoning_gym environment: one question per episode, scored by reasoning_gym itself.

Semantics (the ones the seed tutorials rely on):

- ``reset(dataset_name=, dataset_config=, seed=, size=)`` builds a dataset with
  ``reasoning_gym.create_dataset(name, seed=seed, size=size, **config)`` and serves its first
  question. Arguments left out are filled in as follows: ``dataset_name`` keeps the current
  dataset; ``dataset_config`` keeps the current config when ``dataset_name`` is left out and is
  ``{}`` (reasoning_gym's defaults) when a dataset is named; ``seed`` and ``size`` keep the
  current ones.
- ``reset()`` with none of these serves the next question of the same dataset, wrapping around
  after the last one. Re-sending the dataset arguments would rebuild the dataset and rewind to
  its first question.
- When the very first reset of a session names no dataset, the session serves the default:
  ``chain_sum`` with the seeds' config ``{min_terms: 2, max_terms: 3, min_digits: 2,
  max_digits: 2}``, seed 0, size 1000 (`DEFAULT_DATASET`).
- ``reset(dataset_name="composite", dataset_specs=[{"name": "chain_sum", "weight": 2,
  "config": {...}}, {"name": "leg_counting"}], seed=, size=)`` mixes datasets, as upstream does
  (each part checked like a plain dataset; ``weight`` defaults to 1, ``config`` to ``{}``).
- Bounds (hostile or mistaken input): ``size`` <= ``MAX_DATASET_SIZE``, integer config values
  <= ``MAX_CONFIG_INT`` in absolute value, a question of at most ``MAX_QUESTION_CHARS``
  characters, at most ``MAX_COMPOSITE_PARTS`` parts; a reset over a bound is a DatasetError
  naming the limit.
- The reward after reset is 0.0 (as upstream; the observation's ``score`` stays None).
- ``step(ReasoningGymAction(answer=...))`` scores the answer with the dataset's
  ``score_answer``, reveals ``correct_answer`` and ``dataset_metadata``, and ends the episode:
  ``done=True``, ``reward=score``.

Errors never kill a session. A bad reset (unknown dataset, unknown config key, invalid value)
raises a ``DatasetError`` (a ``ValueError``) whose message says what is valid; the server sends
it to the client as an error frame and the session keeps its previous dataset. A step that cannot be scored (before any
reset, or after the episode is done) returns an observation with ``error`` set, ``done=True`` and
no reward. Malformed actions are refused by OpenEnv's validation before they get here (an error
frame naming the field); the session stays usable.
"""

from __future__ import annotations

import difflib
import json
import logging
import uuid
from dataclasses import fields, is_dataclass
from typing import Any, Dict, Optional

import reasoning_gym
from openenv.core.env_server.interfaces import Environment
from reasoning_gym.factory import DATASETS

from ..models import ReasoningGymAction, ReasoningGymObservation, ReasoningGymState
from .wire_guard import quote

logger = logging.getLogger(__name__)

#: What a session serves when its first reset names no dataset (the seed tutorials' setup).
DEFAULT_DATASET: Dict[str, Any] = {
    "dataset_name": "chain_sum",
    "dataset_config": {"min_terms": 2, "max_terms": 3, "min_digits": 2, "max_digits": 2},
    "seed": 0,
    "size": 1000,
}


#: Bounds on what one reset may ask a server to build (each error names the one it hit).
MAX_DATASET_SIZE = 1_000_000
MAX_CONFIG_INT = 100_000
MAX_QUESTION_CHARS = 50_000
MAX_COMPOSITE_PARTS = 50


class DatasetError(ValueError):
    """A reset asked for a dataset that cannot be built; the message says what is valid."""


def dataset_names() -> list[str]:
    """All dataset names reasoning_gym registers, sorted."""
    return sorted(DATASETS)


def _some(names: list, shown: int = 10) -> str:
    """The first `shown` of `names` (a long one quoted briefly) and how many more: error messages stay short."""
    text = ", ".join(n if isinstance(n, str) and len(n) <= 60 else quote(n) for n in names[:shown])
    return text + (f" and {len(names) - shown:,} more" if len(names) > shown else "")


def _unknown_dataset_message(name: Any) -> str:
    names = dataset_names()
    close = difflib.get_close_matches(str(name), names, n=3)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return (
        f"Unknown reasoning_gym dataset_name {quote(name)}.{hint} "
        f"Valid names ({len(names)}): {', '.join(names)}"
    )


def _config_fields(name: str) -> list[str]:
    config_cls = DATASETS[name][1]
    if is_dataclass(config_cls):
        return [f.name for f in fields(config_cls)]
    return []


def _plain(value: Any) -> Any:
    """JSON-safe copy (tuples become lists, odd objects their str)."""
    return json.loads(json.dumps(value, default=str))


def _as_int(name: str, value: Any, minimum: Optional[int] = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        # JSON has one number type: accept 7.0 but not 7.5 or "7".
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise DatasetError(f"{name} must be an integer, got {quote(value)}.")
    if minimum is not None and value < minimum:
        raise DatasetError(f"{name} must be >= {minimum}, got {value}.")
    return value


def _check_config_values(name: str, config: Dict[str, Any]) -> None:
    """Integer values (also inside lists) at most MAX_CONFIG_INT: 200,000 chain_sum terms is work."""
    for key, value in config.items():
        for item in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(item, (int, float)) and not isinstance(item, bool) and abs(item) > MAX_CONFIG_INT:
                raise DatasetError(
                    f"dataset_config[{quote(key)}] = {item!r} for {name!r} is over this server's limit "
                    f"of {MAX_CONFIG_INT:,} (MAX_CONFIG_INT): ask for smaller questions."
                )


def _parse_specs(specs: Any) -> list:
    """``dataset_specs`` of a composite dataset -> reasoning_gym DatasetSpecs, each part checked."""
    from reasoning_gym.composite import DatasetSpec

    if isinstance(specs, str):
        try:
            specs = json.loads(specs)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"dataset_specs is not valid JSON: {exc}") from exc
    if not isinstance(specs, list) or not specs:
        raise DatasetError(
            'dataset_name="composite" needs dataset_specs, a non-empty list such as '
            '[{"name": "chain_sum", "weight": 1, "config": {}}, {"name": "leg_counting"}].'
        )
    if len(specs) > MAX_COMPOSITE_PARTS:
        raise DatasetError(f"dataset_specs has {len(specs)} parts; the limit is {MAX_COMPOSITE_PARTS}.")
    parts = []
    for i, spec in enumerate(specs):
        if not isinstance(spec, dict) or "name" not in spec:
            raise DatasetError(f"dataset_specs[{i}] must be an object with a 'name', got {quote(spec)}.")
        unknown = sorted(set(spec) - {"name", "weight", "config"})
        if unknown:
            raise DatasetError(f"dataset_specs[{i}] has unknown key(s) {_some(unknown)}; valid: name, weight, config.")
        name, weight, config = spec["name"], spec.get("weight", 1), spec.get("config") or {}
        if name == "composite" or not isinstance(name, str) or name not in DATASETS:
            raise DatasetError(f"dataset_specs[{i}]: " + _unknown_dataset_message(name))
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or weight <= 0:
            raise DatasetError(f"dataset_specs[{i}]['weight'] must be a positive number, got {quote(weight)}.")
        if not isinstance(config, dict):
            raise DatasetError(f"dataset_specs[{i}]['config'] must be an object, got {quote(config)}.")
        _check_config_keys(name, config)
        _check_config_values(name, config)
        parts.append(DatasetSpec(name=name, weight=weight, config=dict(config)))
    return parts


def _check_config_keys(name: str, config: Dict[str, Any]) -> None:
    misplaced = sorted(k for k in config if k in ("seed", "size"))
    if misplaced:
        raise DatasetError(
            f"Pass {' and '.join(misplaced)} to reset() directly, not inside dataset_config."
        )
    valid = [k for k in _config_fields(name) if k not in ("seed", "size")]
    unknown = sorted(k for k in config if k not in valid)
    if unknown:
        raise DatasetError(
            f"Unknown dataset_config key(s) for {name!r}: {_some(unknown)}. "
            f"Valid keys: {', '.join(valid)}"
        )


def build_dataset(name: Any, config: Dict[str, Any], seed: int, size: int, specs: Any = None):
    """`reasoning_gym.create_dataset` with error messages that say what is valid."""
    if size > MAX_DATASET_SIZE:
        raise DatasetError(f"size={size:,} is over this server's limit of {MAX_DATASET_SIZE:,} "
                           "(MAX_DATASET_SIZE); the questions repeat after `size` anyway.")
    if name == "composite":
        parts = _parse_specs(specs)
        try:
            return reasoning_gym.create_dataset("composite", seed=seed, size=size, datasets=parts)
        except (AssertionError, TypeError, ValueError, KeyError) as exc:
            raise DatasetError(f"Invalid dataset_specs: {str(exc) or type(exc).__name__}") from exc
    if specs is not None:
        raise DatasetError('dataset_specs only applies to dataset_name="composite".')
    if not isinstance(name, str) or name not in DATASETS:
        raise DatasetError(_unknown_dataset_message(name))
    _check_config_keys(name, config)
    _check_config_values(name, config)
    try:
        return reasoning_gym.create_dataset(name, seed=seed, size=size, **config)
    except (AssertionError, TypeError, ValueError) as exc:
        detail = str(exc) or type(exc).__name__
        raise DatasetError(f"Invalid dataset_config for {name!r} ({quote(config)}): {quote(detail)}") from exc


class ReasoningGymEnvironment(
    Environment[ReasoningGymAction, ReasoningGymObservation, ReasoningGymState]
):
    """One reasoning_gym question per episode. Each WebSocket session gets its own instance."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._dataset = None  # built lazily by the first reset
        self._spec: Optional[Dict[str, Any]] = None
        self._index: Optional[int] = None
        self._entry: Optional[Dict[str, Any]] = None
        self._done = False
        self._state = ReasoningGymState(episode_id=None, step_count=0)

    # -- reset -------------------------------------------------------------------------------

    def reset(
        self,
        seed: Optional[int] = None,
        episode_id: Optional[str] = None,
        dataset_name: Optional[str] = None,
        dataset_config: Optional[Dict[str, Any]] = None,
        size: Optional[int] = None,
        dataset_specs: Optional[list] = None,
        **kwargs: Any,
    ) -> ReasoningGymObservation:
        if kwargs:
            raise DatasetError(
                f"Unknown reset argument(s): {_some(sorted(kwargs))}. "
                "Valid: dataset_name, dataset_config, dataset_specs, seed, size, episode_id."
            )
        rebuild = any(v is not None for v in (dataset_name, dataset_config, dataset_specs, seed, size))
        if rebuild or self._dataset is None:
            spec = self._resolve_spec(dataset_name, dataset_config, seed, size, dataset_specs)
            dataset = build_dataset(
                spec["dataset_name"], spec["dataset_config"], spec["seed"], spec["size"],
                spec["dataset_specs"],
            )
            index = 0
        else:
            spec, dataset = self._spec, self._dataset
            index = (self._index + 1) % spec["size"]
        entry = dataset[index]
        if len(str(entry["question"])) > MAX_QUESTION_CHARS:
            raise DatasetError(
                f"This config builds questions of {len(str(entry['question'])):,} characters, over "
                f"this server's limit of {MAX_QUESTION_CHARS:,} (MAX_QUESTION_CHARS): ask for smaller ones."
            )
        # Only now commit: a bad reset leaves the session serving its previous dataset.
        self._spec, self._dataset, self._index, self._entry = spec, dataset, index, entry
        self._done = False
        self._state = ReasoningGymState(
            episode_id=episode_id or str(uuid.uuid4()),
            step_count=0,
            dataset_name=self._spec["dataset_name"],
            dataset_config=dict(self._spec["dataset_config"]),
            dataset_specs=self._spec["dataset_specs"],
            seed=self._spec["seed"],
            size=self._spec["size"],
            question_index=self._index,
            done=False,
        )
        # reward 0.0 after reset, as upstream (no answer yet; `score` stays None)
        return ReasoningGymObservation(question=str(self._entry["question"]), done=False, reward=0.0)

    def _resolve_spec(self, dataset_name, dataset_config, seed, size, dataset_specs=None) -> Dict[str, Any]:
        base = self._spec or {**DEFAULT_DATASET, "dataset_specs": None}
        if dataset_config is not None:
            if isinstance(dataset_config, str):  # e.g. straight from a --dataset-config flag
                try:
                    dataset_config = json.loads(dataset_config)
                except json.JSONDecodeError as exc:
                    raise DatasetError(f"dataset_config is not valid JSON: {exc}") from exc
            if not isinstance(dataset_config, dict):
                raise DatasetError(
                    f"dataset_config must be a dict of config values, got {quote(dataset_config)}."
                )
            config = dict(dataset_config)
        elif dataset_name is None:
            config = dict(base["dataset_config"])
        else:
            config = {}
        return {
            "dataset_name": dataset_name if dataset_name is not None else base["dataset_name"],
            "dataset_config": config,
            "seed": _as_int("seed", seed) if seed is not None else base["seed"],
            "size": _as_int("size", size, minimum=1) if size is not None else base["size"],
            "dataset_specs": dataset_specs if dataset_specs is not None
            else (base["dataset_specs"] if dataset_name is None else None),
        }

    # -- step --------------------------------------------------------------------------------

    def step(
        self, action: ReasoningGymAction, timeout_s: Optional[float] = None, **kwargs: Any
    ) -> ReasoningGymObservation:
        if not isinstance(action, ReasoningGymAction):
            return self._error(
                f"Expected ReasoningGymAction(answer=...), got {type(action).__name__}."
            )
        if self._entry is None:
            return self._error(
                "No question yet: call reset() before step(), on the same session (over HTTP, "
                "every /step gets a fresh environment: use the WebSocket client for episodes)."
            )
        if self._done:
            return self._error(
                "This question was already answered: call reset() for the next question."
            )

        entry = self._entry
        try:
            score = float(self._dataset.score_answer(action.answer, entry=entry))
        except Exception:  # a scorer choking on odd input means the answer is wrong
            logger.warning("score_answer failed on %r; scoring 0.0", action.answer, exc_info=True)
            score = 0.0
        self._done = True
        self._state.step_count += 1
        self._state.done = True

        metadata = _plain(entry.get("metadata") or {})
        correct = entry.get("answer")
        if correct is None:  # datasets with many valid answers (propositional_logic) give one
            correct = metadata.get("example_answer")
        return ReasoningGymObservation(
            question=str(entry["question"]),
            score=score,
            correct_answer=None if correct is None else str(correct),
            dataset_metadata=metadata,
            done=True,
            reward=score,
        )

    def _error(self, message: str) -> ReasoningGymObservation:
        return ReasoningGymObservation(
            question=str(self._entry["question"]) if self._entry else "",
            error=message,
            done=True,
            reward=None,
        )

    @property
    def state(self) -> ReasoningGymState:
        return self._state


__all__ = [
    "DEFAULT_DATASET",
    "MAX_CONFIG_INT",
    "MAX_DATASET_SIZE",
    "MAX_QUESTION_CHARS",
    "DatasetError",
    "ReasoningGymEnvironment",
    "build_dataset",
    "dataset_names",
]
