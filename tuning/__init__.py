"""Fine-tuning hyperparameter search (run_tune.py): the search space (search_space.py), the Optuna
study that runs trials as run_squad.py / run_classifier.py processes (search.py), and its table
and plots (report.py). Above training/: it starts the entry points' processes and reads what the
training jobs write."""
