"""Network descriptions, encodings and the numpy reference (no slangpy here)."""
