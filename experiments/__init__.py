"""Experiment entry points: `python -m experiments.<name>`."""
