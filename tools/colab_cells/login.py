# Optional: log in to the Hugging Face Hub (to push the trained model, or to read gated models).
# Skipped unless HUB_LOGIN is True.
# huggingface_hub also reads a Colab secret named HF_TOKEN (the key icon on the left), which avoids pasting a token here.
if HUB_LOGIN:  # noqa: F821 (the parameters cell defines it)
    from huggingface_hub import notebook_login

    notebook_login()
else:
    print("Hub login skipped (set HUB_LOGIN = True to log in).")
