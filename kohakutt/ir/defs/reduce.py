"""IR ops of the reduce family."""
