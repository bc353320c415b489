"""helpers.budget: the wall-time budget stops a trainer after its minutes, and never when it has none."""


def test_time_budget_stops_training_after_its_minutes():
    import time

    from transformers import TrainerControl, TrainerState

    from helpers.budget import time_budget_callback

    state = TrainerState(global_step=3, max_steps=10)
    budget = time_budget_callback(minutes=0.5 / 60)  # half a second
    budget.on_train_begin(None, state, TrainerControl())
    control = budget.on_step_end(None, state, TrainerControl())
    assert not control.should_training_stop
    time.sleep(0.6)
    control = budget.on_step_end(None, state, TrainerControl())
    assert control.should_training_stop and budget.stopped_early
    unlimited = time_budget_callback(None)
    unlimited.on_train_begin(None, state, TrainerControl())
    assert not unlimited.on_step_end(None, state, TrainerControl()).should_training_stop
