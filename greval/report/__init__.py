"""⑥ Files people open: the store report and the agreement report."""
