"""IR ops of the movement family."""
