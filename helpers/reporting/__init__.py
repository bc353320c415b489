"""What a training run leaves and shows: run folders, logging, checkpoints, alarms, plots, publishing."""
