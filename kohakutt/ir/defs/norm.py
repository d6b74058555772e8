"""IR ops of the norm family."""
