"""convstore.domain."""
