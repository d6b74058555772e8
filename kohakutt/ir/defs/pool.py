"""IR ops of the pool family."""
