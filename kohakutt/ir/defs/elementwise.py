"""IR ops of the elementwise family."""
