"""IR ops of the attention family."""
