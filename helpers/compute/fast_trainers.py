"""FastGRPOTrainer and FastSFTTrainer: TRL's trainers with this project's CPU speed paths, the same training.

    trainer_class = GRPOTrainer if PLAIN_TRL else FastGRPOTrainer   # the switch: plain TRL, slower on a CPU
    trainer = trainer_class(model=model, args=config, ...)           # GRPOTrainer's arguments, unchanged

Subclasses, so the trainer a notebook builds is the one that runs: nothing is replaced on the model or on the
trainer from outside. FastGRPOTrainer overrides three methods of TRL 1.16's GRPOTrainer:

- `compute_loss` (the override point Transformers' Trainer documents): a micro-batch whose every advantage is 0
  skips its forward and backward pass, and the trained weights get the zero gradients that pass would have given
  (`helpers.compute.loss_forward.zero_gradient_loss`); `trainer.skipped` counts them. Only where such a pass
  really has no gradient (`why_not_exact`: no KL term, entropy bonus or aux loss), and under `accelerate launch`
  only where every process skips it (DDP reduces gradients inside the pass: one process skipping alone hangs).
- `_get_per_token_logps_and_entropies` (private): each scoring pass computes the prompt prefix its rows share once
  and projects only the completions onto the vocabulary (`forward_prefix_shared`).
- `_generate_single_turn` (private): each rollout turn's batch computes its shared prompt prefix once
  (`prompt_prefix_shared`; the transformers path only, vLLM generates as it does).

FastSFTTrainer overrides SFTTrainer's `compute_loss` only: the prompt prefix a batch's rows share (the system prompt
and tool schema) is computed once, and TRL's fused LM head projects only the positions whose label counts (the
assistant's reply) onto the vocabulary on a CPU too, as it does on a GPU (`forward_prefix_shared`; the same numbers
per position, to fp32's rounding).

The two private names are listed in docs/upstream-compatibility.md and checked by `python -m tools.drift`
(`PRIVATE_OVERRIDES`). tests/test_fast_trainers.py trains both classes from one seed on a small model: the same
completions, the same losses, the same weights. Speeds: docs/measurements.md#the-grpo-loss-pass-on-cpu and
#rollouts-on-cpu.
"""

from __future__ import annotations

from trl import GRPOTrainer, SFTTrainer

from helpers.compute.generation import prompt_prefix_shared
from helpers.compute.loss_forward import SkippedPasses, forward_prefix_shared, why_not_exact, zero_gradient_loss

# The methods of GRPOTrainer this class overrides that TRL does not document (tools/drift.py checks they exist).
PRIVATE_OVERRIDES = ("_get_per_token_logps_and_entropies", "_generate_single_turn")


class FastGRPOTrainer(GRPOTrainer):
    """GRPOTrainer, with the shared prompt prefix computed once in rollouts and loss passes, and no loss pass for a
    micro-batch without gradient. Same arguments, same training (module docstring)."""

    shares_prompt_prefix = True   # helpers.rollouts generates a rollout_func's turns the same way for this trainer

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        reason = why_not_exact(self)
        # None where a zero-advantage micro-batch still has a gradient: then every pass runs, as in TRL
        self.skipped = SkippedPasses() if reason is None else None
        if reason is not None:
            print(f"FastGRPOTrainer: every loss pass runs ({reason})")

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        advantages = inputs.get("advantages") if isinstance(inputs, dict) else None
        if self.skipped is not None and model.training and not return_outputs and advantages is not None:
            self.skipped.seen += 1
            if not self._any_rank_has_gradient(advantages):
                self.skipped.skipped += 1
                return zero_gradient_loss(model)
        return super().compute_loss(model, inputs, return_outputs=return_outputs,
                                    num_items_in_batch=num_items_in_batch)

    def _any_rank_has_gradient(self, advantages) -> bool:
        """Whether this micro-batch has a nonzero advantage on any process. Under `accelerate launch` with several
        processes every rank must run the same passes (DDP reduces gradients inside them), so a pass is skipped
        only where it is skipped on every rank."""
        flag = advantages.any().to(advantages.device, dtype=advantages.dtype).reshape(1)
        if self.accelerator.num_processes > 1:
            flag = self.accelerator.reduce(flag, reduction="sum")
        return bool(flag.item())

    def _get_per_token_logps_and_entropies(self, model, *args, **kwargs):
        with forward_prefix_shared(self.accelerator.unwrap_model(model)):
            return super()._get_per_token_logps_and_entropies(model, *args, **kwargs)

    def _generate_single_turn(self, *args, **kwargs):
        with prompt_prefix_shared(self.accelerator.unwrap_model(self.model_wrapped)):
            return super()._generate_single_turn(*args, **kwargs)


class FastSFTTrainer(SFTTrainer):
    """SFTTrainer whose loss pass computes the shared prompt prefix once and projects only the labelled positions
    onto the vocabulary on a CPU too. Same arguments, same training (module docstring)."""

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        with forward_prefix_shared(self.accelerator.unwrap_model(model)):
            return super().compute_loss(model, inputs, return_outputs=return_outputs,
                                        num_items_in_batch=num_items_in_batch)
