"""Notebook 04's Open Reward Standard parts: a local ORS server, evaluation, the teacher's warm start, and the
trainer's sessions riding out waking servers and lost replies or sessions (resilient.py)."""
