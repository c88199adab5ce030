"""③ The SQLite store of verdicts, runs and human labels, and the figures read out of it."""
