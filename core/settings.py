"""Settings machinery shared by every program: flags, env vars and a file fill one model.

Precedence, highest first: command-line flags, env vars (``<PREFIX><NAME>``),
the YAML/JSON file named by ``--config`` (or ``<PREFIX>CONFIG``), defaults.
pydantic-settings merges them (:meth:`FileSettings.settings_customise_sources`).
Lists are comma-separated in flags and env vars. Flags are made from the model
itself, so flags, env vars and the file cannot drift apart.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import re
import sys
import textwrap
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any, Literal, NoReturn, TypeVar, get_args, get_origin

from pydantic import BaseModel, BeforeValidator, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    YamlConfigSettingsSource,
)

LISTS_NOTE = "Options taking a list take comma-separated values and may be given several times."


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
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise ValueError(f"expected an IP address or localhost as HOST, got {host!r}") from None
    return host or "0.0.0.0", int(port)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) is on the loopback network."""
    return host == "localhost" or ipaddress.ip_address(host).is_loopback


def setting_names(name: str, env_prefix: str) -> str:
    """``--flag / PREFIX_ENV``: how a message names a setting."""
    return f"--{name.replace('_', '-')} / {env_prefix}{name.upper()}"


class SettingError(ValueError):
    """A check across settings failed; ``field`` is the setting the message tells to change."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class SettingsFileError(ValueError):
    """The settings file cannot be read or does not hold a mapping of settings."""


_FILE: ContextVar[Path | None] = ContextVar("settings_file", default=None)


class _SettingsFile(YamlConfigSettingsSource):
    """The ``--config`` file (JSON is YAML too); its keys may be spelt like flags."""

    def _read_file(self, file_path: Any) -> dict[str, Any]:
        import yaml  # only when a file is named: the agent on every node saves its memory

        try:
            data = super()._read_file(file_path)
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise SettingsFileError(f"cannot read it: {exc}") from None
        if not isinstance(data, dict):
            raise SettingsFileError("it must hold a mapping of setting: value")
        return {str(k).replace("-", "_"): v for k, v in data.items()}


class FileSettings(BaseSettings):
    """Base of every program's settings: init values (flags), env vars, the file, defaults.

    :func:`load_settings` names the file for the one call that builds the
    settings; it is never state of the process.
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
        return init_settings, env_settings, _SettingsFile(settings_cls, yaml_file=_FILE.get())


# hand-written: pydantic's messages span lines, link to its docs and never name the flag
def describe_error(error: ValidationError, prefix: str, file: Path | None = None) -> str:
    """One line naming each bad setting (flag and env var) and what it expects."""
    return "; ".join(_describe(item, prefix, file) for item in error.errors(include_url=False))


def _describe(item: ErrorDetails, prefix: str, file: Path | None) -> str:
    cause = (item.get("ctx") or {}).get("error")
    name = ".".join(str(p) for p in item["loc"][:1])
    if item["type"] == "extra_forbidden":
        where = f" in settings file {file}" if file is not None else ""
        return f"unknown setting {name!r}{where}: see --help for the settings there are"
    if isinstance(cause, SettingError):
        name = cause.field
    if not name:
        return f"invalid settings: {cause or item['msg']}"
    got = f", got {item['input']!r}" if item["loc"] and "input" in item else ""
    return f"invalid setting {setting_names(name, prefix)}: {_expected(item, cause)}{got}"


_EXPECTED = {
    "float_parsing": "expected a number",
    "float_type": "expected a number",
    "int_parsing": "expected a whole number",
    "int_type": "expected a whole number",
    "int_from_float": "expected a whole number",
    "bool_parsing": "expected true or false",
    "bool_type": "expected true or false",
    "string_type": "expected text",
    "path_type": "expected a file path",
    "list_type": "expected a comma-separated list",
}


def _expected(item: ErrorDetails, cause: object) -> str:
    """What the setting expects, said for people rather than in pydantic's words."""
    ctx = item.get("ctx") or {}
    if cause is not None:
        return str(cause)
    if item["type"] in _EXPECTED:
        return _EXPECTED[item["type"]]
    bounds = {"greater_than": "above", "greater_than_equal": "at least"}
    bounds |= {"less_than": "below", "less_than_equal": "at most"}
    if item["type"] in bounds:
        limit = next(iter(ctx.values()))
        # a float bound prints as 0.0; people write 0
        shown = f"{limit:g}" if isinstance(limit, float) else limit
        return f"expected a number {bounds[item['type']]} {shown}"
    if item["type"] == "literal_error":
        return f"expected one of {ctx.get('expected', '')}".replace("'", "")
    return item["msg"]


class HelpFormatter(argparse.HelpFormatter):
    """Help that never breaks a line at a hyphen: defaults and flags stay whole."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        text = self._whitespace_matcher.sub(" ", text).strip()
        return textwrap.wrap(text, width, break_on_hyphens=False, break_long_words=False)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "\n\n".join(
            textwrap.fill(
                " ".join(part.split()),
                width,
                initial_indent=indent,
                subsequent_indent=indent,
                break_on_hyphens=False,
            )
            for part in text.split("\n\n")
        )


class ArgumentParser(argparse.ArgumentParser):
    """A parser whose usage errors are one line, as every other start-up error is.

    A flag none of its options knows is refused by the parser it was given to, so that
    ``hami-collector serve --no-such-flag`` points at ``serve --help``, where the flags are:
    argparse leaves a subcommand's unknown flags to the top parser, whose help lists none.
    """

    def parse_known_args(self, *args: Any, **kwargs: Any) -> Any:
        parsed, unknown = super().parse_known_args(*args, **kwargs)
        if unknown:
            self.error(f"unrecognized arguments: {' '.join(unknown)}")
        return parsed, unknown

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


# hand-written, not CliSettingsSource: it cannot group flags by topic or show derived defaults
def add_model_flags(
    parser: argparse.ArgumentParser,
    model: type[BaseModel],
    env_prefix: str,
    groups: Mapping[str, Sequence[str]],
) -> None:
    """Add a ``--flag`` for every field of ``model``, under its heading in ``groups``.

    Unset flags leave the field alone. Every field must be in exactly one group,
    so that a new setting cannot end up under no heading.
    """
    placed = [name for names in groups.values() for name in names]
    if sorted(placed) != sorted(model.model_fields):
        raise ValueError(
            f"groups must place every field once: {sorted(set(placed) ^ set(model.model_fields))}"
        )
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        help=f"YAML or JSON settings file (env {env_prefix}CONFIG).",
    )
    for title, names in groups.items():
        group = parser.add_argument_group(title)
        for name in names:
            _add_flag(group, name, model.model_fields[name], env_prefix)


def _add_flag(group: argparse._ArgumentGroup, name: str, field: FieldInfo, env_prefix: str) -> None:
    flag = "--" + name.replace("_", "-")
    help_text = (
        f"{plain(field.description or '')} ({_default(field)}env {env_prefix}{name.upper()})"
    )
    choices = _choices(field)
    # choices shown but not enforced here: pydantic's check gives the one-line message
    metavar = "{" + ",".join(choices) + "}" if choices else name.upper()
    if field.annotation is bool:
        group.add_argument(
            flag, action=argparse.BooleanOptionalAction, default=argparse.SUPPRESS, help=help_text
        )
    elif field.annotation == list[str]:
        group.add_argument(
            flag,
            action=_JoinComma,
            default=argparse.SUPPRESS,
            metavar=metavar + ",...",
            help=help_text,
        )
    else:
        group.add_argument(flag, default=argparse.SUPPRESS, metavar=metavar, help=help_text)


def _choices(field: FieldInfo) -> list[str]:
    """The values an enumerated setting takes: a Literal's, or the field's ``choices`` extra."""
    if get_origin(field.annotation) is Literal:
        return [str(choice) for choice in get_args(field.annotation)]
    extra = field.json_schema_extra
    choices = extra.get("choices") if isinstance(extra, dict) else None
    return [str(choice) for choice in choices] if isinstance(choices, list) else []


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
    """``default: VALUE; `` as --help shows it (lists comma-separated, as flags take them).

    A field whose default is derived from others says how in its ``shown_default`` extra.
    """
    extra = field.json_schema_extra
    if isinstance(extra, dict) and "shown_default" in extra:
        return f"default: {extra['shown_default']}; "
    value = field.get_default(call_default_factory=True)
    if value is None or value == "":
        return "default: unset; "
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

    Exit with status 2 and one line naming the bad settings when they do not validate.
    """
    flags = dict(flags)
    path = flags.pop("config", None) or _env_path(env_prefix)
    if path is not None and not path.is_file():
        fail(f"invalid settings file {path} (--config / {env_prefix}CONFIG): no such file")
    token = _FILE.set(path)
    try:
        return model(**flags)
    except ValidationError as exc:
        fail(describe_error(exc, env_prefix, path))
    except SettingsFileError as exc:
        said = " ".join(str(exc).split())  # YAML errors span several lines
        fail(f"invalid settings file {path} (--config / {env_prefix}CONFIG): {said}")
    except ValueError as exc:  # an env var pydantic-settings could not decode
        fail(f"invalid settings: {' '.join(str(exc).split())}")
    finally:
        _FILE.reset(token)


def fail(message: str) -> NoReturn:
    """End a program that cannot start: ``message`` on one line, exit status 2."""
    print(message, file=sys.stderr)
    raise SystemExit(2)


def _env_path(env_prefix: str) -> Path | None:
    value = os.environ.get(env_prefix + "CONFIG")
    return Path(value) if value else None
