"""The record explorer: a static folder beside index.html (``explorer/``) that opens from disk — no server, no
network — and shows every record behind every figure. Python computes every figure (the same functions as the
report, ``greval results`` and ``greval agreement``) and writes it into the data files; the JavaScript only
filters, sorts and shows (greval/report/explorer/static/).
"""
