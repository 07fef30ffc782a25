"""The anthropic wire format: the Anthropic Messages API.

The only place that knows this format: decoding responses (streamed and not) into domain
drafts, reading the history a captured request carries, encoding a conversation as the
native request, the provider's configuration block, and its HTTP client. `adapter`
registers it as a `ProviderAdapter`.

May import: `convstore.domain`, `convstore.adapters.wire`, `convstore.adapters.config`
and `convstore.adapters.http`; never another provider's package.
"""
