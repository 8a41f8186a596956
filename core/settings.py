"""Settings machinery shared by every program: flags, env vars and a file fill one model.

Precedence, highest first: command-line flags, env vars (``<PREFIX><NAME>``),
the YAML/JSON file named by ``--config`` (or ``<PREFIX>CONFIG``), defaults.
Lists are comma-separated in flags and env vars. Flags are made from the model
itself, so flags, env vars and the file cannot drift apart.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import re
import sys
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, BeforeValidator, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, EnvSettingsSource, NoDecode, PydanticBaseSettingsSource


def _split(value: Any) -> Any:
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


CommaList = Annotated[list[str], NoDecode, BeforeValidator(_split)]


def parse_listen(value: str) -> tuple[str, int]:
    """Split ``HOST:PORT`` (``[v6]:PORT`` too) and check both parts."""
    host, sep, port = value.rpartition(":")
    host = host.strip("[]")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected HOST:PORT, got {value!r}")
    if host not in ("", "localhost"):
        ipaddress.ip_address(host)
    return host or "0.0.0.0", int(port)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) is on the loopback network."""
    return host == "localhost" or ipaddress.ip_address(host).is_loopback


def _read_file(path: Path) -> dict[str, Any]:
    """The values of a YAML or JSON settings file, keyed by field name."""
    import yaml  # only when a file is named: the agent on every node saves its memory

    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ValueError(str(exc)) from None
    if not isinstance(data, dict):
        raise ValueError(f"settings file {path} must hold a mapping")
    return {str(k).replace("-", "_"): v for k, v in data.items()}


class FileSettings(BaseSettings):
    """Base of every program's settings: init values, then env vars, then defaults.

    :func:`load_settings` puts a settings file's values under the env vars; the
    file is an argument of that call, never state of the process.
    """

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return init_settings, env_settings


def describe_error(error: ValidationError, prefix: str) -> str:
    """Turn a validation error into lines that name each bad setting."""
    lines = []
    for item in error.errors():
        name = ".".join(str(p) for p in item["loc"]) or "settings"
        if item["type"] == "extra_forbidden":
            lines.append(f"unknown setting {name!r}")
            continue
        where = f"--{name.replace('_', '-')} / {prefix}{name.upper()}" if item["loc"] else name
        got = f" (got {item['input']!r})" if item["loc"] and "input" in item else ""
        lines.append(f"invalid setting {where}: {item['msg']}{got}")
    return "\n".join(lines)


def add_model_flags(
    parser: argparse.ArgumentParser, model: type[BaseModel], env_prefix: str
) -> None:
    """Add a ``--flag`` for every field of ``model``; unset flags leave the field alone."""
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        help=f"YAML or JSON settings file (env {env_prefix}CONFIG).",
    )
    for name, field in model.model_fields.items():
        flag = "--" + name.replace("_", "-")
        help_text = (
            f"{plain(field.description or '')} ({_default(field)}env {env_prefix}{name.upper()})"
        )
        if field.annotation is bool:
            parser.add_argument(
                flag,
                action=argparse.BooleanOptionalAction,
                default=argparse.SUPPRESS,
                help=help_text,
            )
        elif field.annotation == list[str]:
            parser.add_argument(
                flag,
                action=_JoinComma,
                default=argparse.SUPPRESS,
                metavar=name.upper(),
                help=help_text + " [repeatable]",
            )
        else:
            parser.add_argument(
                flag, default=argparse.SUPPRESS, metavar=name.upper(), help=help_text
            )


class _JoinComma(argparse.Action):
    """A list flag given several times: its values are joined, as if comma-separated."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        before = getattr(namespace, self.dest, None)
        setattr(namespace, self.dest, f"{before},{values}" if before else values)


def _default(field: FieldInfo) -> str:
    """``default: VALUE; `` as --help shows it (lists comma-separated, as flags take them)."""
    value = field.get_default(call_default_factory=True)
    if value is None or value == "":
        return "" if "default" in (field.description or "") else "default: unset; "
    if isinstance(value, bool):
        return f"default: {'yes' if value else 'no'}; "
    if isinstance(value, list):
        return f"default: {','.join(map(str, value)) or 'empty'}; "
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"default: {value}; "


_ROLE = re.compile(r":[a-z]+:`~?(?:[\w.]*\.)?([^`]+)`")


def plain(text: str) -> str:
    """``text`` without reStructuredText markup: roles become their last name, literals plain."""
    return _ROLE.sub(r"\1", text).replace("``", "")


S = TypeVar("S", bound=FileSettings)


def load_settings(model: type[S], flags: dict[str, Any], env_prefix: str) -> S:
    """Build settings from parsed flags (``config`` among them), env vars and the file.

    Exit with status 2 and one line per bad setting when they do not validate.
    """
    flags = dict(flags)
    path = flags.pop("config", None) or _env_path(env_prefix)
    try:
        values = _read_file(path) if path is not None else {}
    except (OSError, ValueError) as exc:
        print(f"invalid settings file {path}: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    try:
        return model(**{**values, **EnvSettingsSource(model)(), **flags})
    except ValidationError as exc:
        print(describe_error(exc, env_prefix), file=sys.stderr)
    except ValueError as exc:  # an env var pydantic-settings could not decode
        print(f"invalid settings: {exc}", file=sys.stderr)
    raise SystemExit(2)


def _env_path(env_prefix: str) -> Path | None:
    value = os.environ.get(env_prefix + "CONFIG")
    return Path(value) if value else None
