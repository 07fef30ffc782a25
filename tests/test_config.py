"""Configuration: the TOML file, `--cfg` overrides and fragments, and the Anthropic block."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from convstore.adapters.anthropic.config import (
    HOSTED_TOOL_SUPPORT,
    NATIVE_TOOL_VERSIONS,
    AnthropicConfig,
    endpoint_kind,
    hosted_tool_declarations,
    model_generation,
    tool_name_of,
    validate_hosted_tools,
)
from convstore.adapters.config.loading import (
    CONFIG_ENV,
    config_dir,
    config_path,
    deep_merge,
    load_config,
    lookup,
    parse_override,
)
from convstore.domain.errors import ConfigurationError


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty user config folder (XDG_CONFIG_HOME), no CONVSTORE_CONFIG."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv(CONFIG_ENV, raising=False)
    folder = config_dir()
    assert folder == tmp_path / "xdg" / "convstore"
    folder.mkdir(parents=True)
    return folder


# --- the file ------------------------------------------------------------------------------------


def test_no_file_is_an_empty_configuration(home: Path) -> None:
    assert config_path() == (home / "config.toml", False)
    assert load_config() == {}


def test_the_default_file_is_read(home: Path) -> None:
    (home / "config.toml").write_text('[providers.anthropic]\nmodel = "claude-sonnet-4-5"\n')
    assert load_config() == {"providers": {"anthropic": {"model": "claude-sonnet-4-5"}}}


def test_convstore_config_names_the_file(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    named = tmp_path / "elsewhere.toml"
    named.write_text("[limits]\nmax_event_bytes = 1024\n")
    monkeypatch.setenv(CONFIG_ENV, str(named))
    assert config_path() == (named, True)
    assert load_config() == {"limits": {"max_event_bytes": 1024}}
    monkeypatch.setenv(CONFIG_ENV, str(tmp_path / "missing.toml"))
    with pytest.raises(ConfigurationError, match=r"missing\.toml does not exist"):
        load_config()
    with pytest.raises(ConfigurationError, match="does not exist"):
        load_config(path=tmp_path / "also-missing.toml")


def test_dev_null_means_no_configuration(home: Path) -> None:
    if not Path("/dev/null").exists():
        pytest.skip("no /dev/null")
    (home / "config.toml").write_text("[providers.anthropic]\nmodel = 'm'\n")
    assert load_config(path="/dev/null") == {}


def test_malformed_toml_names_the_file_and_line(home: Path) -> None:
    (home / "config.toml").write_text('[providers]\nok = 1\nbroken = "unterminated\n')
    with pytest.raises(ConfigurationError) as caught:
        load_config()
    message = str(caught.value)
    assert str(home / "config.toml") in message and "line 3" in message


# --- overrides -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("item", "parts", "value"),
    [
        ("a.b.enable=true", ("a", "b", "enable"), True),
        ("a.max_uses=5", ("a", "max_uses"), 5),
        ("a.x=1.5", ("a", "x"), 1.5),
        ('a.domains=["a.com", "b.org"]', ("a", "domains"), ["a.com", "b.org"]),
        ('a.name="quoted"', ("a", "name"), "quoted"),
        ("a.name=plain text", ("a", "name"), "plain text"),
        ("a.name=claude-sonnet-4-5", ("a", "name"), "claude-sonnet-4-5"),
        ("a.empty=", ("a", "empty"), ""),
        ('a."dotted.key"=x', ("a", "dotted.key"), "x"),
        (" a.b = 2 ", ("a", "b"), 2),
        ("a.t={ city = 'Lyon' }", ("a", "t"), {"city": "Lyon"}),
        ("a.b=x=y", ("a", "b"), "x=y"),
    ],
)
def test_parse_override(item: str, parts: tuple[str, ...], value: Any) -> None:
    assert parse_override(item) == (parts, value)


@pytest.mark.parametrize("item", ["=1", "a..b=1", "a b=1", "[a]=1"])
def test_a_malformed_override_is_an_error(item: str) -> None:
    with pytest.raises(ConfigurationError, match="--cfg"):
        parse_override(item)


def test_overrides_apply_in_order_over_the_file(home: Path) -> None:
    (home / "config.toml").write_text(
        "[providers.anthropic]\nmax_tokens = 100\n"
        "[providers.anthropic.hosted_tools.web_search]\nmax_uses = 1\n"
    )
    config = load_config(
        [
            "providers.anthropic.hosted_tools.web_search.enable=true",
            "providers.anthropic.max_tokens=200",
            "providers.anthropic.max_tokens=300",
        ]
    )
    assert config["providers"]["anthropic"] == {
        "max_tokens": 300,
        "hosted_tools": {"web_search": {"max_uses": 1, "enable": True}},
    }
    assert lookup(config, "providers.anthropic.hosted_tools.web_search.enable") is True
    assert lookup(config, "providers.openai.model", "none") == "none"


def test_a_key_path_crossing_a_value_is_an_error(home: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"providers\.anthropic is a string, not a table"):
        load_config(["providers.anthropic=x", "providers.anthropic.model=m"])
    (home / "config.toml").write_text("[providers.anthropic]\nmodel = 'm'\n")
    with pytest.raises(ConfigurationError, match=r"providers\.anthropic is a table"):
        load_config(["providers.anthropic=5"])
    with pytest.raises(ConfigurationError, match=r"model is a string, not a table"):
        load_config(["providers.anthropic.model.name=x"])


# --- fragments -----------------------------------------------------------------------------------


def test_fragments_merge_from_the_config_folder_in_order(home: Path, tmp_path: Path) -> None:
    (home / "websearch.toml").write_text(
        "[providers.anthropic.hosted_tools.web_search]\nenable = true\nmax_uses = 5\n"
    )
    (home / "cheap.toml").write_text(
        "[providers.anthropic]\nmax_tokens = 512\n"
        "[providers.anthropic.hosted_tools.web_search]\nmax_uses = 1\n"
    )
    config = load_config(["websearch", "cheap"])
    assert config["providers"]["anthropic"] == {
        "hosted_tools": {"web_search": {"enable": True, "max_uses": 1}},
        "max_tokens": 512,
    }
    later = load_config(["cheap", "websearch", "providers.anthropic.max_tokens=7"])
    anthropic = later["providers"]["anthropic"]
    assert anthropic["hosted_tools"]["web_search"]["max_uses"] == 5
    assert anthropic["max_tokens"] == 7
    # A fragment next to a file named by CONVSTORE_CONFIG is found there first.
    other = tmp_path / "project"
    other.mkdir()
    (other / "config.toml").write_text("")
    (other / "websearch.toml").write_text("[providers.anthropic]\nmodel = 'project'\n")
    config = load_config(["websearch"], path=other / "config.toml")
    assert config["providers"]["anthropic"] == {"model": "project"}
    # A .toml path merges that file.
    config = load_config([str(other / "websearch.toml")])
    assert config["providers"]["anthropic"]["model"] == "project"


def test_an_unknown_fragment_is_an_error(home: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"unknown configuration fragment.*nosuch\.toml"):
        load_config(["nosuch"])
    with pytest.raises(ConfigurationError, match="not key=value"):
        load_config(["no such thing"])
    with pytest.raises(ConfigurationError, match="does not exist"):
        load_config(["missing/file.toml"])


def test_a_malformed_fragment_names_its_file(home: Path) -> None:
    (home / "bad.toml").write_text("enable = = true\n")
    with pytest.raises(ConfigurationError, match=r"bad\.toml: malformed TOML.*line 1"):
        load_config(["bad"])


def test_a_fragment_crossing_a_value_is_an_error(home: Path) -> None:
    (home / "flat.toml").write_text("[providers]\nanthropic = 'x'\n")
    with pytest.raises(ConfigurationError, match=r"flat\.toml: providers\.anthropic"):
        load_config(["providers.anthropic.model=m", "flat"])


def test_deep_merge() -> None:
    base: dict[str, Any] = {"a": {"b": 1, "c": {"d": 2}}, "e": [1]}
    deep_merge(base, {"a": {"c": {"f": 3}}, "e": [2]})
    assert base == {"a": {"b": 1, "c": {"d": 2, "f": 3}}, "e": [2]}


# --- API keys ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "items",
    [
        ["providers.anthropic.api_key=sk-ant-secret-123"],
        ["providers.openai.openai_api_key=sk-ant-secret-123"],
        ["apikey=sk-ant-secret-123"],
    ],
)
def test_api_keys_are_never_read_from_configuration(home: Path, items: list[str]) -> None:
    with pytest.raises(ConfigurationError, match="environment") as caught:
        load_config(items)
    assert "sk-ant-secret-123" not in str(caught.value)


def test_an_api_key_in_the_file_is_refused_without_echoing_it(home: Path) -> None:
    (home / "config.toml").write_text('[providers.anthropic]\napi_key = "sk-ant-secret-456"\n')
    with pytest.raises(ConfigurationError, match=r"providers\.anthropic\.api_key") as caught:
        load_config()
    assert "sk-ant-secret-456" not in str(caught.value)
    # Naming the variable to read is fine.
    (home / "config.toml").write_text('[providers.anthropic]\napi_key_env = "MY_KEY"\n')
    assert load_config() == {"providers": {"anthropic": {"api_key_env": "MY_KEY"}}}


# --- the Anthropic block -------------------------------------------------------------------------


def test_hosted_tools_are_disabled_by_default() -> None:
    config = AnthropicConfig.from_config({})
    assert config.base_url == "https://api.anthropic.com"
    assert config.hosted_tools.enabled() == []
    assert hosted_tool_declarations(config) == {}
    assert not config.hosted_tools.enables("web_search")


def test_the_anthropic_block_from_a_fragment(home: Path) -> None:
    (home / "websearch.toml").write_text(
        "[providers.anthropic.hosted_tools.web_search]\n"
        "enable = true\nmax_uses = 5\nblocked_domains = ['reddit.com']\n"
        "user_location = { city = 'Lyon', country = 'FR', timezone = 'Europe/Paris' }\n"
    )
    config = AnthropicConfig.from_config(load_config(["websearch"]))
    assert config.hosted_tools.enabled() == ["web_search"]
    assert hosted_tool_declarations(config) == {
        "web_search": {
            "type": "web_search_20250305",
            "name": "web_search",
            "max_uses": 5,
            "blocked_domains": ["reddit.com"],
            "user_location": {
                "type": "approximate",
                "city": "Lyon",
                "country": "FR",
                "timezone": "Europe/Paris",
            },
        }
    }


def test_web_fetch_and_code_execution_declarations() -> None:
    config = AnthropicConfig.from_block(
        {
            "hosted_tools": {
                "web_fetch": {
                    "enable": True,
                    "max_uses": 2,
                    "allowed_domains": ["example.com"],
                    "citations": {"enabled": True},
                    "max_content_tokens": 10000,
                },
                "code_execution": {"enable": True},
            }
        }
    )
    assert hosted_tool_declarations(config) == {
        "web_fetch": {
            "type": "web_fetch_20250910",
            "name": "web_fetch",
            "max_uses": 2,
            "allowed_domains": ["example.com"],
            "citations": {"enabled": True},
            "max_content_tokens": 10000,
        },
        "code_execution": {"type": "code_execution_20250825", "name": "code_execution"},
    }
    assert {tool_name_of(v) for v in NATIVE_TOOL_VERSIONS.values()} == set(NATIVE_TOOL_VERSIONS)


@pytest.mark.parametrize(
    ("block", "match"),
    [
        ({"modle": "x"}, r"providers\.anthropic: unknown key 'modle'"),
        (
            {"hosted_tools": {"web_search": {"enabled": True}}},
            r"providers\.anthropic\.hosted_tools\.web_search: unknown key 'enabled'",
        ),
        ({"hosted_tools": {"web_serch": {}}}, r"hosted_tools: unknown key 'web_serch'"),
        (
            {"hosted_tools": {"web_search": {"enable": "yes"}}},
            r"web_search\.enable: Expected `bool",
        ),
        ({"hosted_tools": {"web_search": {"max_uses": 0}}}, r"max_uses: Expected `int` >= 1"),
        (
            {"hosted_tools": {"web_fetch": {"allowed_domains": ["a"], "blocked_domains": ["b"]}}},
            "cannot both be set",
        ),
        (
            {"hosted_tools": {"web_search": {"user_location": {"type": "exact"}}}},
            r"user_location\.type",
        ),
        ({"base_url": "api.anthropic.com"}, "not an http"),
        ({"api_key": "x"}, "unknown key 'api_key'"),
    ],
)
def test_a_bad_anthropic_block_is_a_clear_error(block: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        AnthropicConfig.from_block(block)


def test_the_provider_block_must_be_a_table() -> None:
    with pytest.raises(ConfigurationError, match="must be a table"):
        AnthropicConfig.from_config({"providers": {"anthropic": 5}})


@pytest.mark.parametrize(
    ("model", "generation"),
    [
        ("claude-3-haiku-20240307", ("haiku", (3, 0))),
        ("claude-3-5-sonnet-latest", ("sonnet", (3, 5))),
        ("claude-3-7-sonnet-20250219", ("sonnet", (3, 7))),
        ("claude-sonnet-4-20250514", ("sonnet", (4, 0))),
        ("claude-sonnet-4-5-20250929", ("sonnet", (4, 5))),
        ("claude-opus-4-1", ("opus", (4, 1))),
        ("us.anthropic.claude-haiku-4-5-20251001-v1:0", ("haiku", (4, 5))),
        ("claude-sonnet-4-5@20250929", ("sonnet", (4, 5))),
        ("claude-2.1", ("legacy", (2, 0))),
        ("claude-instant-1.2", ("legacy", (2, 0))),
        ("gpt-5", None),
    ],
)
def test_model_generation(model: str, generation: Any) -> None:
    assert model_generation(model) == generation


@pytest.mark.parametrize(
    ("model", "served"),
    [
        ("claude-3-haiku-20240307", set()),
        ("claude-3-opus-20240229", set()),
        ("claude-2.1", set()),
        ("claude-3-5-haiku-latest", {"web_search", "web_fetch", "code_execution"}),
        ("claude-3-5-sonnet-latest", {"web_search"}),
        ("claude-3-7-sonnet-latest", {"web_search", "web_fetch", "code_execution"}),
        ("claude-sonnet-4-5", {"web_search", "web_fetch", "code_execution"}),
        ("claude-opus-4-1-20250805", {"web_search", "web_fetch", "code_execution"}),
        ("claude-haiku-4-5", {"web_search", "web_fetch", "code_execution"}),
    ],
)
def test_which_models_serve_which_hosted_tools(model: str, served: set[str]) -> None:
    config = AnthropicConfig()
    for tool in HOSTED_TOOL_SUPPORT:
        if tool in served:
            validate_hosted_tools(config, model, [tool])
        else:
            with pytest.raises(ConfigurationError, match=f"{tool} is not available on model"):
                validate_hosted_tools(config, model, [tool])


@pytest.mark.parametrize(
    ("base_url", "kind", "served"),
    [
        ("https://api.anthropic.com", "first_party", True),
        ("https://api.anthropic.com/", "first_party", True),
        ("http://127.0.0.1:8080", "loopback", True),
        ("http://localhost:9000/v1", "loopback", True),
        ("https://bedrock-runtime.us-east-1.amazonaws.com", "bedrock", False),
        ("https://us-east5-aiplatform.googleapis.com/v1/projects/p", "vertex", False),
        ("https://my-resource.services.ai.azure.com/anthropic", "foundry", False),
        ("https://gateway.example.com", "other", False),
    ],
)
def test_endpoints_that_serve_hosted_tools(base_url: str, kind: str, served: bool) -> None:
    assert endpoint_kind(base_url) == kind
    config = AnthropicConfig.from_block({"base_url": base_url})
    if served:
        validate_hosted_tools(config, "claude-sonnet-4-5", ["web_search", "web_fetch"])
    else:
        with pytest.raises(ConfigurationError, match="endpoint_serves_hosted_tools"):
            validate_hosted_tools(config, "claude-sonnet-4-5", ["web_search"])
    # No hosted tool: any endpoint will do.
    validate_hosted_tools(config, "claude-sonnet-4-5", [])


def test_the_endpoint_rule_can_be_overridden_both_ways() -> None:
    gateway = AnthropicConfig.from_block(
        {"base_url": "https://gateway.example.com", "endpoint_serves_hosted_tools": True}
    )
    validate_hosted_tools(gateway, "claude-sonnet-4-5", ["web_search"])
    local_off = AnthropicConfig.from_block({"endpoint_serves_hosted_tools": False})
    with pytest.raises(ConfigurationError, match="endpoint_serves_hosted_tools = false"):
        validate_hosted_tools(local_off, "claude-sonnet-4-5", ["web_search"])


def test_an_unreadable_model_name_is_refused_rather_than_guessed() -> None:
    with pytest.raises(ConfigurationError, match="cannot tell"):
        validate_hosted_tools(AnthropicConfig(), "my-fine-tune", ["web_search"])
    # A hosted tool this table does not know is checked against the endpoint only.
    validate_hosted_tools(AnthropicConfig(), "my-fine-tune", ["tool_search_tool_regex"])
