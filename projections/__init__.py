"""convstore.projections: readings of the event log (the portable reading and its exports)."""

from convstore.projections.export import FORMATS, file_name, render, write_all, write_one
from convstore.projections.portable import SCHEMA, PortableConversation, fold, load, load_all

__all__ = [
    "FORMATS",
    "SCHEMA",
    "PortableConversation",
    "file_name",
    "fold",
    "load",
    "load_all",
    "render",
    "write_all",
    "write_one",
]
