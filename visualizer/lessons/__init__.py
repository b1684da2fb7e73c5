"""Lessons: predict, run, compare. Definitions in ``catalog``; answers from captures in ``answers``."""
