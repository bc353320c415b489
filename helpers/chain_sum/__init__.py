"""Notebooks 01 and 02's reasoning_gym sums: evaluation, preflight, GRPO sizing, the local teacher, SFT data."""
