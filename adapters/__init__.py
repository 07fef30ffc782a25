"""convstore.adapters."""
