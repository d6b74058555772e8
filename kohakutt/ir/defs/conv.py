"""IR ops of the conv family."""
