"""Abstract interpretation of tile IR and the concrete reference interpreter (its oracle)."""
