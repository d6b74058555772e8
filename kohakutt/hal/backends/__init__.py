"""The HAL's backends: ``sim`` (the simulated card, default) and ``ttnn`` (a real card through TT-NN)."""
