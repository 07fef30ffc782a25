"""The google wire format."""
