"""RMM/hipMM allocation logs: loading, analysis and replay through real memory resources.

Usable from Python alone; never imports typer or rich.
"""
