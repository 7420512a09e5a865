"""Preconditioners: classical one- and two-level Schwarz, and learned Schwarz attention."""
