"""IR ops of the embedding family."""
