"""Workspace sizing against the real rocBLAS/rocSOLVER, on a real or a virtual AMD GPU.

Usable from Python alone; never imports typer or rich.
"""
