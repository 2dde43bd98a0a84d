"""make bench: one module per measurement family beside their shared helpers (common.py); `python -m tools.bench`
runs them (__main__.py, whose docstring lists the families and the commands)."""
