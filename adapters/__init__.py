"""convstore.adapters: the outside world, one subpackage per thing adapted.

    wire/        provider-neutral wire pieces: SSE framing, the stream assembler, what the
                 encoders share, captured request bodies, the provider-adapter interface
    anthropic/   the Messages API          ┐ one package per provider wire format:
    openai/      the Responses API         │ decode, encode, history, config, client
    google/      the Gemini API            ┘
    config/      the configuration: the TOML file, fragments, overrides, provider blocks
    http/        HTTP to the providers: the transport, retries, typed errors
    recording/   the recording core: ingest captured traffic, ask a live provider, replay
    terminal/    the one sanitizer, the renderer, and what `show` prints
    proxy/       a recording reverse proxy in front of the providers' APIs
    web/         a web viewer for browsing, searching and auditing conversations
    cli/         the command line, and the demo

Each subpackage's docstring says what it may import; `tests/test_layout.py` checks it.
Nothing imports `cli`. Modules are imported by their full name; no `__init__` re-exports,
so a command imports only what it uses.
"""
