"""Input and output: pybids queries, BOLD readers and writers, stimulus apertures."""
