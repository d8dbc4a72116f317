"""Returns, advantages, losses and the learner: pure functions."""
