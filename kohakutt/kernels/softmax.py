"""The softmax family on each backend."""
