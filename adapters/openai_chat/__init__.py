"""The openai-chat wire format: OpenAI Chat Completions (`/v1/chat/completions`).

Spoken by OpenAI and by every OpenAI-compatible server (Ollama, vLLM, llama.cpp,
DeepSeek, Groq, Mistral, OpenRouter, Perplexity, Azure OpenAI). The only place that knows
this format: decoding responses (streamed and not) into domain drafts, reading the
request a captured body carries, and the provider's configuration-free `ProviderAdapter`
(`adapter`). Its payloads are bound to the server (the `base_url` host) as well as the
model.

May import: `convstore.domain`, `convstore.adapters.wire`, `convstore.adapters.config`
and `convstore.adapters.http`; never another provider's package.
"""
