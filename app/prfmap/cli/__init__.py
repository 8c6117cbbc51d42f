"""The prfmap command-line entry points: ``prfmap`` (run.py) and ``prfmap-synth`` (synth.py)."""
