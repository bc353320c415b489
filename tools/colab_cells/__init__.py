"""The code cells `tools.colab` adds to each Colab copy, kept as real Python (linted, imported by the tests).

install.py  the set-up cell: self-contained, since nothing of this project is installed when it runs; it acts
            only when run as a cell (`__name__ == "__main__"`), so `tools.colab` imports its filter
login.py    the optional Hub login
hardware.py what this runtime has and what PROFILE = "gpu" trains on it (PROFILE comes from the parameters cell)

`tools.colab` copies them into the notebooks, setting the repository, the ref and the login's flags.
"""
