"""How a run behaves on its host: memory budgets, stop signals and progress display.

These modules import nothing of prfmap but :mod:`prfmap.errors`, so the command line, the
participant level and the checkpoints share them without importing each other.
"""
