"""The policy a notebook trains: where it starts, how it loads and saves, which layers learn (helpers/models/policy.py).

    model_path, said = warm_start(NOTEBOOK, settings.model, warm=settings.warm_start)
    model = load_policy(model_path, lora=settings.lora)      # fp32 weights (or LoRA adapters), on the GPU if any
    freeze_lower_layers(model, settings.freeze_layers)
    save_policy(model, tokenizer, folder)

Model names become folders in helpers.model_folders (which builds the offline models once).
"""

from helpers.models.policy import (LoRAError, align_with_tokenizer, describe_trainable, free_memory,  # noqa: F401
                                   freeze_lower_layers, load_policy, missing_checkpoint_line, save_policy,
                                   trainable_parameters, warm_start, warm_start_record)
