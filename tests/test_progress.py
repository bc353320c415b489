"""Long work prints lines with an estimate (helpers.progress), which a saved notebook keeps."""

from helpers.progress import ProgressLines, minutes_and_seconds


def test_a_line_after_the_first_piece_then_at_most_one_a_minute_and_one_at_the_end():
    now, lines = [0.0], []
    progress = ProgressLines("evaluation (900 questions)", 900, unit="replies", clock=lambda: now[0],
                             echo=lambda line, flush: lines.append(line))
    for seconds in (40.0, 80.0, 120.0, 150.0):     # batches of 64 rows, one every 40 s then 30 s
        now[0] = seconds
        progress.advance(64)
    assert lines[0] == "evaluation (900 questions): 64 of 900 replies in 40 s, about 8 min 42 s left"
    assert len(lines) == 2 and lines[1].startswith("evaluation (900 questions): 192 of 900 replies in 2 min 00 s")
    now[0] = 600.0
    progress.advance(900 - 256)
    assert lines[-1] == "evaluation (900 questions): 900 replies in 10 min 00 s"


def test_a_job_done_in_one_piece_prints_nothing():
    lines = []
    ProgressLines("probe", 16, echo=lambda line, flush: lines.append(line)).advance(16)
    assert lines == [] and minutes_and_seconds(59.6) == "1 min 00 s"


def test_generation_in_batches_prints_its_progress(capsys):
    """The evaluation's own batching loop prints the lines (a real tiny model, greedy)."""
    import torch
    from transformers import AutoModelForCausalLM

    from helpers.compute.generation import generate_in_batches
    from helpers.model_folders import resolve_model

    model = AutoModelForCausalLM.from_pretrained(resolve_model("tiny"))
    prompts = [[1, 2, 3 + i] for i in range(6)]
    with torch.no_grad():
        out = generate_in_batches(model, prompts, batch_size=2, pad_token_id=0, progress="evaluation",
                                  max_new_tokens=2, do_sample=False)
    text = capsys.readouterr().out
    assert len(out) == 6 and "evaluation: 2 of 6 replies in" in text and "evaluation: 6 replies in" in text
