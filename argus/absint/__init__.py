"""Abstract interpretation of tile IR, and the concrete reference interpreter it is tested against."""
