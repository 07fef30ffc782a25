"""convstore.projections."""
