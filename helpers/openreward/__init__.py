"""Notebook 04's Open Reward Standard parts: a local ORS server, the student (policy.py), evaluation and the ORS
preflight, the teacher's warm start, and the trainer's sessions riding out waking servers and lost replies or sessions
(resilient.py)."""
