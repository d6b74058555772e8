"""IR ops of the softmax family."""
