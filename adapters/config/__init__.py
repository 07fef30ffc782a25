"""The configuration: a TOML file, named fragments and `--cfg key=value` overrides
(`loading`), and what the providers' blocks (`providers.<name>`) share (`provider`).

May import: `convstore.domain`.
"""
