"""IR ops of the random family."""
