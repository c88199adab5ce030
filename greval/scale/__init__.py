"""Runs beyond one process: ``greval run --engine ray`` (:mod:`greval.scale.ray_engine`).

Ray is imported only inside :mod:`greval.scale.ray_engine`, and only when a run asks for it: ``import greval``
and ``greval --help`` never load it.
"""
