"""Imports of the histories other tools hold (`convstore import FORMAT PATH`).

One subpackage per source format reads it into `source.ImportedConversation`s (drafts of
the events each conversation becomes, and what could not be carried); `record` writes
them through the application service, idempotent on the source's ids; `formats` names
the importers."""
