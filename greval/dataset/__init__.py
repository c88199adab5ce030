"""Records in: the dataset reader and its normalisation."""
