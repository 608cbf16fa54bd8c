"""Read inventory and vars files as YAML, keeping the line of every mapping key.

Errors must name the line of the offending key, so mappings are built as `LineMap` (a dict
that also records where each key was written). Ansible's `!vault` and `!unsafe` tags are
accepted: vault values stay opaque, unsafe strings are literal text that is never a template.
"""

from __future__ import annotations

from typing import Any

import yaml

from clusterkit.errors import InventoryError

_BaseLoader: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class LineMap(dict[Any, Any]):
    """A YAML mapping that remembers its own line and the line of each key (1-based)."""

    __slots__ = ("key_lines", "line")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.line: int | None = None
        self.key_lines: dict[Any, int] = {}

    def line_of(self, key: Any) -> int | None:
        return self.key_lines.get(key, self.line)


class VaultValue:
    """An Ansible Vault ciphertext: only Ansible can decrypt it, so it stays opaque here."""

    __slots__ = ("ciphertext",)

    def __init__(self, ciphertext: str) -> None:
        self.ciphertext = ciphertext

    def __repr__(self) -> str:
        return "<vault-encrypted value>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, VaultValue) and other.ciphertext == self.ciphertext

    def __hash__(self) -> int:
        return hash(self.ciphertext)


class UnsafeText(str):
    """A `!unsafe` string: Ansible never templates it, so `{{` in it is literal text."""

    __slots__ = ()


def is_template(value: Any) -> bool:
    """True for strings Ansible would render with Jinja (which clusterkit cannot do)."""
    return (
        isinstance(value, str)
        and not isinstance(value, UnsafeText)
        and ("{{" in value or "{%" in value)
    )


class SourceFloat(float):
    """A YAML float that keeps its text: `cuda: 12.10` is version "12.10", not 12.1."""

    __slots__ = ("source_text",)
    source_text: str

    def __new__(cls, value: float, source_text: str) -> SourceFloat:
        number = super().__new__(cls, value)
        number.source_text = source_text
        return number


class _LineLoader(_BaseLoader):  # type: ignore[misc]
    """Safe loader whose mappings are LineMaps; it notes every repeated key and its line."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.duplicates: list[tuple[Any, int]] = []


_STR_TAG = "tag:yaml.org,2002:str"
_MERGE_TAGS = ("tag:yaml.org,2002:merge", "tag:yaml.org,2002:value")


def _construct_mapping(loader: Any, node: yaml.MappingNode) -> LineMap:
    if any(key_node.tag in _MERGE_TAGS for key_node, _ in node.value):
        loader.flatten_mapping(node)
    result = LineMap()
    result.line = node.start_mark.line + 1
    key_lines = result.key_lines
    for key_node, value_node in node.value:
        if key_node.tag == _STR_TAG and isinstance(key_node, yaml.ScalarNode):
            key = key_node.value  # the common case, without the generic constructor's cost
        else:
            key = loader.construct_object(key_node, deep=True)
            try:
                hash(key)
            except TypeError as exc:
                raise yaml.constructor.ConstructorError(
                    None, None, "found an unhashable key (a list or mapping)", key_node.start_mark
                ) from exc
        if key in result:
            loader.duplicates.append((key, key_node.start_mark.line + 1))
        result[key] = loader.construct_object(value_node, deep=True)
        key_lines[key] = key_node.start_mark.line + 1
    return result


def _construct_vault(loader: Any, node: yaml.Node) -> VaultValue:
    return VaultValue(str(loader.construct_scalar(node)))


def _construct_unsafe(loader: Any, node: yaml.Node) -> Any:
    if isinstance(node, yaml.ScalarNode):
        return UnsafeText(loader.construct_scalar(node))
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    assert isinstance(node, yaml.MappingNode)
    return _construct_mapping(loader, node)


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _construct_float(loader: Any, node: yaml.ScalarNode) -> SourceFloat:
    return SourceFloat(loader.construct_yaml_float(node), str(node.value))


_LineLoader.add_constructor("tag:yaml.org,2002:float", _construct_float)
_LineLoader.add_constructor("!vault", _construct_vault)
_LineLoader.add_constructor("!vault-encrypted", _construct_vault)
_LineLoader.add_constructor("!unsafe", _construct_unsafe)


def read_text(path: str) -> str:
    """The file's text, or an InventoryError that says why it cannot be read."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        raise InventoryError(path, "no such file", hint="check the path") from None
    except IsADirectoryError:
        raise InventoryError(path, "is a directory; pass the inventory file itself") from None
    except PermissionError:
        raise InventoryError(path, "permission denied: the file is not readable") from None
    except UnicodeDecodeError as exc:
        raise InventoryError(path, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise InventoryError(path, f"cannot read: {exc.strerror or exc}") from None


def load_yaml(path: str, text: str | None = None, warnings: list[str] | None = None) -> Any:
    """Parse one YAML document; syntax errors become one-line InventoryErrors with the line.
    A key repeated in one mapping keeps its last value, as in Ansible, which warns about it:
    so do we, into `warnings` ("file:line: ...")."""
    if text is None:
        text = read_text(path)
    loader = _LineLoader(text)
    try:
        data = loader.get_single_data()
        if warnings is not None:
            warnings.extend(
                f"{path}:{line}: duplicate key {key!r}: using the last value only"
                for key, line in loader.duplicates
            )
        return data
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = " ".join(str(exc.problem or exc.context or "invalid YAML").split())
        raise InventoryError(path, f"invalid YAML: {problem}", line=line) from None
    except yaml.YAMLError as exc:
        raise InventoryError(path, f"invalid YAML: {' '.join(str(exc).split())}") from None
    finally:
        loader.dispose()
