"""Splitting a file into documents and parsing each one safely.

Splitting follows apimachinery's ``yaml.NewYAMLReader`` (a line starting with ``---`` ends a
document; only spaces or a comment may follow it on that line), then ``TrimSpace``, dropping empty
documents, exactly as kube-apiserver does, so document indexes match what it would report.

Parsing follows the universal deserializer: a document starting with ``{`` is JSON, anything else is
YAML converted to JSON. Both reject duplicate keys (strict decoding). YAML is parsed with a safe
loader that keeps timestamps as strings (YAML-to-JSON conversion does), supports merge keys, and
refuses alias expansion that would blow up (a "billion laughs" document) or recursive aliases.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from staticadm.yamltext import describe_yaml_error

#: Above this many nodes after alias expansion a document is refused outright.
MAX_EXPANDED_NODES = 1_000_000
#: Aliases may not multiply a document by more than this factor (plus some slack for small files).
MAX_ALIAS_EXPANSION_RATIO = 10
ALIAS_EXPANSION_SLACK = 10_000

_MERGE_TAG = "tag:yaml.org,2002:merge"


class DocumentError(Exception):
    """A document that cannot be split or parsed; the message is shown to the operator."""


@dataclass(frozen=True, slots=True)
class Document:
    index: int
    text: str


def split_documents(data: bytes) -> list[Document]:
    """``NewYAMLReader`` + ``TrimSpace`` + drop empty, as kube-apiserver's loader splits files."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise DocumentError(f"file is not valid UTF-8: {err}") from None
    documents: list[str] = []
    buffer: list[str] = []
    # Only "\n" ends a line for Go's line reader; str.splitlines would also split on \r, \f, ...
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
    for line in lines:
        if line.startswith("---"):
            rest = line[3:].strip()
            if rest and not rest.startswith("#"):
                raise DocumentError(f"invalid Yaml document separator: {rest}")
            documents.append("".join(buffer))
            buffer = []
            continue
        buffer.append(line)
    documents.append("".join(buffer))
    # Go's bytes.TrimSpace trims ASCII and Unicode whitespace, as str.strip() does.
    trimmed = [doc.strip() for doc in documents]
    return [Document(i, doc) for i, doc in enumerate(d for d in trimmed if d)]


def parse_document(text: str) -> Any:
    """Parse one document into JSON-like Python values, raising DocumentError on any problem."""
    if text.lstrip().startswith("{"):
        return _parse_json(text)
    return _parse_yaml(text)


def _parse_json(text: str) -> Any:
    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for key, value in items:
            if key in result:
                raise DocumentError(f'json: duplicate field "{key}"')
            result[key] = value
        return result

    try:
        return json.loads(text, object_pairs_hook=pairs)
    except json.JSONDecodeError as err:
        raise DocumentError(f"invalid JSON: {err}") from None
    except RecursionError:
        raise DocumentError("invalid JSON: nesting too deep") from None


# LibYAML's parser when PyYAML has it (the wheels do): the pure-Python scanner dominated load time,
# about 3 ms per policy file. Construction and resolution stay PyYAML's safe ones either way.
_BaseLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_BaseLoader):  # type: ignore[valid-type,misc]
    """SafeLoader without the timestamp resolver: YAML-to-JSON conversion keeps timestamps as text."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _parse_yaml(text: str) -> Any:
    try:
        # The pure-Python reader checks the characters as it is built (ReaderError).
        loader = _Loader(text)
    except yaml.YAMLError as err:
        raise DocumentError(f"invalid YAML: {describe_yaml_error(err)}") from None
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(node)
        return _Converter(loader).convert(node)
    except yaml.YAMLError as err:
        raise DocumentError(f"invalid YAML: {describe_yaml_error(err)}") from None
    except RecursionError:
        raise DocumentError("invalid YAML: nesting too deep") from None
    finally:
        loader.dispose()


def _check_expansion(root: Node) -> None:
    """Refuse recursive aliases and alias fan-out before anything walks the expanded tree."""
    sizes: dict[int, int] = {}
    in_progress: set[int] = set()

    def size(node: Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in in_progress:
            raise DocumentError("invalid YAML: recursive alias")
        in_progress.add(key)
        total = 1
        if isinstance(node, SequenceNode):
            total += sum(size(child) for child in node.value)
        elif isinstance(node, MappingNode):
            total += sum(size(k) + size(v) for k, v in node.value)
        in_progress.discard(key)
        sizes[key] = total
        if total > MAX_EXPANDED_NODES:
            raise DocumentError(f"invalid YAML: document expands to more than {MAX_EXPANDED_NODES} nodes")
        return total

    expanded = size(root)
    distinct = len(sizes)
    if expanded > distinct * MAX_ALIAS_EXPANSION_RATIO + ALIAS_EXPANSION_SLACK:
        raise DocumentError(
            f"invalid YAML: aliases expand {distinct} nodes to {expanded}, "
            f"more than {MAX_ALIAS_EXPANSION_RATIO} times the document (alias bomb?)"
        )


class _Converter:
    def __init__(self, loader: _Loader) -> None:
        self._loader = loader

    def convert(self, node: Node) -> Any:
        if isinstance(node, ScalarNode):
            return self._loader.construct_object(node, deep=True)
        if isinstance(node, SequenceNode):
            return [self.convert(child) for child in node.value]
        if isinstance(node, MappingNode):
            return self._mapping(node)
        raise DocumentError(f"invalid YAML: unexpected node {type(node).__name__}")

    def _mapping(self, node: MappingNode) -> dict[str, Any]:
        result: dict[str, Any] = {}
        merged: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                merged.update(self._merge_sources(value_node))
                continue
            key = _json_key(self.convert(key_node))
            if key in result:
                line = key_node.start_mark.line + 1
                raise DocumentError(f'yaml: unmarshal errors:\n  line {line}: key "{key}" already set in map')
            result[key] = self.convert(value_node)
        # Explicit keys win over merged ones.
        return {**{k: v for k, v in merged.items() if k not in result}, **result}

    def _merge_sources(self, node: Node) -> dict[str, Any]:
        sources = node.value if isinstance(node, SequenceNode) else [node]
        merged: dict[str, Any] = {}
        # In a merge sequence, earlier mappings take precedence.
        for source in reversed(sources):
            if not isinstance(source, MappingNode):
                raise DocumentError("invalid YAML: map merge requires map or sequence of maps as the value")
            merged.update(self._mapping(source))
        return merged


def _json_key(key: Any) -> str:
    """YAML keys become JSON object keys: non-string scalars are rendered as text."""
    if isinstance(key, str):
        return key
    if isinstance(key, bool):
        return "true" if key else "false"
    if key is None:
        return "null"
    if isinstance(key, int | float):
        return str(key)
    raise DocumentError(f"invalid YAML: unsupported map key {key!r}")
