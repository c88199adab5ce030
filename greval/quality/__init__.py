"""Tools for judging the judge: spec lint, draft and trial, and reliability checks."""
