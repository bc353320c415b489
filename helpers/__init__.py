"""helpers: the shared code behind the numbered notebooks (one module per concern; see the README's map).

Importing it silences exactly one library notice: TRL 1.16 reads transformers' deprecated
`is_gradient_checkpointing` while it generates, so every training cell printed a red FutureWarning a learner
can do nothing about. Nothing else is filtered.
"""

import warnings

warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*is deprecated", category=FutureWarning)
