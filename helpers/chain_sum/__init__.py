"""Notebooks 01 and 02's reasoning_gym sums: each notebook's steps that are not the lesson (walkthrough.py for 01,
sft_steps.py for 02), evaluation, preflight, GRPO sizing and diagnosis, the local teacher, SFT data."""
