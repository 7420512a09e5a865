"""Learning: optimisers, training data, the training loop and evaluation metrics."""
