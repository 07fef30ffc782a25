"""convstore.storage."""
