"""The parts of ``scripts/service_cost_run.py``: its inputs, its measurements, and its floods and loop.

The script imports this package as ``service_cost``, from its own directory (as
``scripts/fuzz.py`` imports ``fuzzing``), never through the ``scripts`` package:
``--corpus-root DIR`` puts ``DIR`` first on the path before anything imports
``scripts``, so that ``scripts.corpus.costly`` comes from that tree.
"""
