"""Benchmarks, each a script run as `python benchmarks/NAME.py`; a package only so that tests
and type checking can import their analysis by one name."""
