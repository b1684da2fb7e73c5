"""The AST instrumenter (instrumenter.py, the one function that applies passes) and the lenses' passes."""
