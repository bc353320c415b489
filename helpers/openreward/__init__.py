"""Notebook 04's Open Reward Standard parts: a local ORS server, evaluation, the teacher's warm start."""
