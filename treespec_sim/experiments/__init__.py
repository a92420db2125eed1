"""Small, reproducible experiments that answer one question each (run as ``python -m``)."""
