"""Provider-neutral wire pieces: what every provider package builds on.

`sse` frames Server-Sent Events; `assembler` turns start / delta / stop events into
native blocks; `captured` reads a captured request alike for every provider; `bodies`
makes byte-exact edits of a request body; `encoding` holds what the encoders share;
`providers` is the `ProviderAdapter` interface and the registry the commands use.

May import: `convstore.domain`. Provider packages are reached only by name, through the
registry in `providers`, never imported.
"""
