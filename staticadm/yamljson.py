"""YAML and JSON text to JSON-like Python values, safely: the one place staticadm parses either.

Every reader (manifests, request and namespace files, PolicyTest files, ``--var``, the config file) goes
through here, so each gets the same guarantees:

- **Depth.** kube-apiserver's decoders stop at 10,000 levels (go-yaml's scanner: ``max_flow_level`` and
  ``max_indents``, "exceeded max depth of 10000"; encoding/json as vendored in sigs.k8s.io/json:
  ``maxNestingDepth``). staticadm's walks over decoded values are recursive (as are Python's json and
  orjson), so it stops at :data:`MAX_DEPTH`, before anything recursive has seen the text: YAML is built
  from libyaml's event stream (a state machine; PyYAML's composer, which recurses in C and overflows the
  stack near 30,000 levels, is never used), JSON is measured by a scan that does not recurse.
- **Aliases.** go-yaml v2's rule (decode.go ``allowedAliasRatio``): once more than 1,000 nodes were decoded
  and more than 100 of them through aliases, aliases may have made at most 99% of them (less for documents
  past 400,000 decodes), else "document contains excessive aliasing" ("billion laughs"); a document may
  not refer to itself, nor expand past :data:`MAX_EXPANDED_NODES` nodes (staticadm's own bound).
- **Scalars as kube-apiserver reads them**: go-yaml v2's resolution (``y``/``n``/``on``/``off`` are
  booleans, ``1:30`` is text, ``1e3`` and ``0o17`` are numbers) and sigs.k8s.io/yaml's conversion to JSON
  (:mod:`staticadm.yamlresolve`): timestamps stay text, merge keys (``<<``) apply, map keys become strings.
  Strict decoding refuses a key set twice in one map as go-yaml holds it (typed: ``y`` is the bool true,
  ``"true"`` a string), merged keys included (``<<`` into a map that has the key, two merged maps sharing
  one); keys that only meet as JSON strings load, the later in the document kept (kube-apiserver keeps either:
  sigs.k8s.io/yaml ranges over a Go map).
- **Errors** are :class:`ParseError` naming the line and column (of the whole text, so they locate the
  document of a stream too), never a ``RecursionError`` or PyYAML's ``<unicode string>``.
"""

from __future__ import annotations

import json
import re
from typing import Any

import yaml
from yaml.events import (
    AliasEvent,
    DocumentEndEvent,
    DocumentStartEvent,
    Event,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
)

from staticadm.yamlresolve import MERGE_TAG, Resolved, ResolveError, go_key_text, json_key, json_value, resolve

#: The deepest nesting of maps and lists accepted, aliases expanded. kube-apiserver's is 10,000
#: (:data:`KUBERNETES_MAX_DEPTH`); staticadm's walks over values (json.dumps, request building, pruning, CEL
#: conversion) recurse within Python's 1,000-frame limit, some at two frames a level (a generator per level,
#: as copy.deepcopy does), beside their callers' frames. Real objects nest a few dozen levels.
MAX_DEPTH = 400
KUBERNETES_MAX_DEPTH = 10_000
#: Above this many nodes after alias expansion a document is refused outright (staticadm's bound; go-yaml's alias
#: ratio lets a multi-megabyte document expand further).
MAX_EXPANDED_NODES = 1_000_000
#: go-yaml v2 decode.go: the alias ratio scales from 99% to 10% between these decode counts.
_ALIAS_RATIO_RANGE_LOW = 400_000
_ALIAS_RATIO_RANGE_HIGH = 4_000_000
EXCESSIVE_ALIASING = "yaml: document contains excessive aliasing"


def allowed_alias_ratio(decodes: int) -> float:
    """go-yaml v2's ``allowedAliasRatio``."""
    if decodes <= _ALIAS_RATIO_RANGE_LOW:
        return 0.99
    if decodes >= _ALIAS_RATIO_RANGE_HIGH:
        return 0.10
    return 0.99 - 0.89 * ((decodes - _ALIAS_RATIO_RANGE_LOW) / (_ALIAS_RATIO_RANGE_HIGH - _ALIAS_RATIO_RANGE_LOW))


class ParseError(ValueError):
    """Text that is not a document staticadm accepts; the message is shown to the operator as it is."""

    @property
    def problem(self) -> str:
        """The message without its ``invalid YAML: `` (or JSON) lead, for callers that name the input's
        format themselves. Lines are the stream's own: they locate the document too."""
        return str(self).removeprefix("invalid YAML: ").removeprefix("invalid JSON: ")


class _DecodeError(ParseError):
    """A problem found while building values (a duplicate key, an alias, a tag): go-yaml finds these after
    parsing the whole document, so a syntax error further on is reported instead."""


def describe_yaml_error(error: yaml.YAMLError, source: str = "") -> str:
    """``line L, column C: problem`` (and where the construct it belongs to started), 1-based like Go's
    YAML errors and every editor. A problem at a tab of ``source`` (the text parsed) says so: the scanner's
    "found character that cannot start any token" never names the tab it could not read."""
    if isinstance(error, yaml.MarkedYAMLError) and error.problem_mark is not None:
        mark = error.problem_mark
        text = f"line {mark.line + 1}, column {mark.column + 1}: {error.problem or 'invalid YAML'}"
        if 0 <= mark.index < len(source) and source[mark.index] == "\t":
            text += " (a tab: YAML indents with spaces only)"
        if error.context and error.context_mark is not None:
            context = error.context_mark
            text += f" ({error.context} at line {context.line + 1}, column {context.column + 1})"
        elif error.context:
            text += f" ({error.context})"
        return text
    if isinstance(error, yaml.reader.ReaderError):
        return f"character {error.position + 1}: {error.reason}"
    return str(error).replace('in "<unicode string>", ', "").replace("\n", " ")


def _too_deep(line: int, column: int) -> str:
    return (f"line {line}, column {column}: nested more than {MAX_DEPTH} levels deep "
            f"(staticadm's limit; kube-apiserver's decoders stop at {KUBERNETES_MAX_DEPTH})")


# -- documents and streams -----------------------------------------------------------------------------


def parse_document(text: str) -> Any:
    """One document, as the universal deserializer reads it: JSON when it starts with ``{``, else YAML."""
    if text.lstrip().startswith("{"):
        return parse_json(text)
    return parse_yaml(text)


def parse_stream(text: str, json_starts: tuple[str, ...] = ("{",)) -> list[Any]:
    """Every document of a file: one JSON document when the text starts with one of ``json_starts``, else
    the documents of a YAML stream (empty ones as ``None``)."""
    if text.lstrip().startswith(json_starts):
        return [parse_json(text)]
    return parse_yaml_stream(text)


# -- JSON ----------------------------------------------------------------------------------------------

#: Strings (skipped whole, so brackets inside them do not count) and brackets.
_JSON_NESTING = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)


def _check_json_depth(text: str) -> None:
    depth = 0
    for match in _JSON_NESTING.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                start = match.start()
                line, column = text.count("\n", 0, start) + 1, start - text.rfind("\n", 0, start)
                raise ParseError(f"invalid JSON: {_too_deep(line, column)}")
        elif token in "]}":
            depth -= 1


def _strict_object(items: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in items:
        if key in result:
            raise ParseError(f'json: duplicate field "{key}"')
        result[key] = value
    return result


def parse_json(text: str) -> Any:
    """One JSON value; duplicate object keys are an error (kube-apiserver decodes strictly)."""
    # Only text that holds brackets can nest; most inline values (--var x=1) skip the scan.
    if "[" in text or "{" in text:
        _check_json_depth(text)
    try:
        return json.loads(text, object_pairs_hook=_strict_object)
    except json.JSONDecodeError as error:
        raise ParseError(f"invalid JSON: {error}") from None
    except RecursionError:
        # Only when a caller has used most of Python's recursion limit itself: json recurses a frame a level.
        raise ParseError(f"invalid JSON: nested too deep for the frames left to decode it "
                         f"(at most {MAX_DEPTH} levels are accepted)") from None


# -- YAML ----------------------------------------------------------------------------------------------

# LibYAML's parser when PyYAML has it (the wheels do): the pure-Python scanner dominated load time, about
# 3 ms per policy file. Both parsers are state machines; only their composers recurse, and neither is used.
_BaseLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_BaseLoader):  # type: ignore[valid-type,misc]
    """Only the parser's events are used: scalars are resolved as go-yaml v2 does (yamlresolve), not by
    PyYAML's YAML 1.1 resolvers."""


def parse_yaml(text: str) -> Any:
    """The one document of a YAML stream (``None`` when it holds none)."""
    documents = _read_yaml(text, single=True)
    return documents[0] if documents else None


def parse_yaml_stream(text: str) -> list[Any]:
    """Every document of a YAML stream; an empty document is ``None``."""
    return _read_yaml(text, single=False)


def _read_yaml(text: str, *, single: bool) -> list[Any]:
    documents: list[Any] = []
    try:
        # The pure-Python reader checks the characters as it is built (ReaderError).
        loader = _Loader(text)
    except yaml.YAMLError as error:
        raise ParseError(f"invalid YAML: {describe_yaml_error(error)}") from None
    try:
        loader.get_event()  # StreamStartEvent
        while not loader.check_event(StreamEndEvent):
            if single and documents:
                _another_document(loader)
            try:
                documents.append(_DocumentBuilder(loader, len(text)).build())
            except _DecodeError as error:
                # The document was read to its end; a second one is reported first, as PyYAML's composer does.
                if single and not loader.check_event(StreamEndEvent):
                    _another_document(loader)
                raise ParseError(str(error)) from None
        return documents
    except yaml.YAMLError as error:
        raise ParseError(f"invalid YAML: {describe_yaml_error(error, text)}") from None
    finally:
        loader.dispose()


def _another_document(loader: _Loader) -> None:
    line, column, _ = _position(loader.peek_event())
    raise ParseError(f"invalid YAML: line {line}, column {column}: "
                     "but found another document (expected a single document in the stream)")


class _Collection:
    """A map or list being built, with what its alias accounting and depth checks need."""

    __slots__ = ("anchor", "entries", "first_built", "first_decode", "go_keys", "height", "key", "key_identity",
                 "key_line", "key_shown", "state", "value")

    def __init__(self, value: dict[str, Any] | list[Any], anchor: str | None, first_decode: int,
                 first_built: int) -> None:
        self.value = value
        self.anchor = anchor
        #: The nodes built before this collection (its own count included at its end).
        self.first_built = first_built
        #: go-yaml's decode count before this collection: its decodes are the count at its end less this.
        self.first_decode = first_decode
        #: Levels below this one (0 while it holds only scalars).
        self.height = 0
        #: For maps: 0 expecting a key, 1 expecting the key's value, 2 expecting a merge key's value.
        self.state = 0
        self.key: Any = None
        self.key_line = 0
        #: The key as go-yaml's duplicate-key error shows it (Go's %#v of the resolved key).
        self.key_shown = ""
        #: The key as go-yaml's map holds it: its Go type and value.
        self.key_identity: tuple[str, Any] = ("", None)
        #: For maps: the keys set so far as go-yaml holds them, and every entry set (what a merge of it sets).
        self.go_keys: set[tuple[str, Any]] = set()
        self.entries: list[_Entry] = []


#: A map entry as go-yaml sets it: the key's Go identity, its %#v, its JSON key and the line of its value.
_Entry = tuple[tuple[str, Any], str, str, int]


class _DocumentBuilder:
    """Builds one document from parser events without recursion, checking depth and alias expansion as it
    goes (the composer's node graph is never built)."""

    def __init__(self, loader: _Loader, text_length: int) -> None:
        self._loader = loader
        self._text_length = text_length
        self._stack: list[_Collection] = []
        #: Anchor name -> (value, go-yaml decodes, nodes built, height) of the anchored node, once it is complete;
        #: a scalar's value is its :class:`Resolved`, converted where it is used (as a key or as a value).
        self._anchors: dict[str, tuple[Any, int, int, int]] = {}
        #: go-yaml's decode counts (decode.go ``decodeCount``, ``aliasCount``) and the nodes built.
        self._decodes = 0
        self._alias_decodes = 0
        self._built = 0
        #: The entries of every map built (by id: aliases of a map are copies with its entries), for merges.
        self._entries: dict[int, list[_Entry]] = {}

    def build(self) -> Any:
        try:
            return self._build()
        except _DecodeError:
            while not isinstance(self._loader.get_event(), DocumentEndEvent):
                pass
            raise

    def _build(self) -> Any:
        loader = self._loader
        start = loader.get_event()
        if not isinstance(start, DocumentStartEvent):
            raise ParseError(f"invalid YAML: unexpected {type(start).__name__}")
        root: Any = None
        while True:
            event = loader.get_event()
            kind = event.__class__
            if kind is ScalarEvent:
                tag = event.tag or ""
                plain = bool(event.implicit[0])
                expects_key = self._expects_key()
                # decode.go's isMerge: a plain "<<" or one tagged !!merge, as a map key.
                if expects_key and event.value == "<<" and (plain or tag == MERGE_TAG):
                    # go-yaml decodes the merge key's value into the map, never the key itself.
                    self._stack[-1].state = 2
                    continue
                resolved = self._resolve(event, tag, plain)
                value, height = self._converted(resolved, event, as_key=expects_key), 0
                self._decodes += 1
                self._count(1)
                if event.anchor is not None:
                    self._anchors[event.anchor] = (resolved, 1, 1, 0)
            elif kind is MappingStartEvent or kind is SequenceStartEvent:
                self._open(event, {} if kind is MappingStartEvent else [])
                continue
            elif kind is MappingEndEvent or kind is SequenceEndEvent:
                value, height = self._close()
            elif kind is AliasEvent:
                value, height = self._alias(event)
            elif kind is DocumentEndEvent:
                break
            else:
                raise ParseError(f"invalid YAML: unexpected {kind.__name__}")
            if self._stack:
                self._add(value, height, event)
            else:
                root = value
        return root

    def _expects_key(self) -> bool:
        return bool(self._stack) and self._stack[-1].state == 0 and isinstance(self._stack[-1].value, dict)

    def _count(self, built: int) -> None:
        self._built += built
        if self._built > MAX_EXPANDED_NODES:
            raise _DecodeError(f"invalid YAML: document expands to more than {MAX_EXPANDED_NODES} nodes")

    def _resolve(self, event: Event, tag: str, plain: bool) -> Resolved:
        try:
            return resolve(tag, event.value, plain=plain)  # type: ignore[attr-defined]
        except ResolveError as error:
            line, column, _ = _position(event)
            raise _DecodeError(f"invalid YAML: line {line}, column {column}: {error}") from None

    def _converted(self, resolved: Resolved, event: Event, *, as_key: bool) -> Any:
        """A scalar as sigs.k8s.io/yaml writes it: a JSON object key (text) or a JSON value."""
        try:
            if as_key:
                collection = self._stack[-1]
                collection.key_shown = go_key_text(resolved)
                collection.key_identity = (type(resolved.value).__name__, resolved.value)
                return json_key(resolved)
            return json_value(resolved)
        except ResolveError as error:
            line, column, _ = _position(event)
            raise _DecodeError(f"invalid YAML: line {line}, column {column}: {error}") from None

    def _open(self, event: Event, value: dict[str, Any] | list[Any]) -> None:
        if len(self._stack) >= MAX_DEPTH:
            raise ParseError(f"invalid YAML: {_too_deep(*_position(event)[:2])}")
        self._count(1)
        self._stack.append(_Collection(value, event.anchor, self._decodes, self._built))  # type: ignore[attr-defined]
        self._decodes += 1

    def _close(self) -> tuple[Any, int]:
        collection = self._stack.pop()
        value = collection.value
        if isinstance(value, dict):
            self._entries[id(value)] = collection.entries
        height = collection.height + 1
        if collection.anchor is not None:
            self._anchors[collection.anchor] = (value, self._decodes - collection.first_decode,
                                                self._built - collection.first_built + 1, height)
        return value, height

    def _alias(self, event: AliasEvent) -> tuple[Any, int]:
        line, column, _ = _position(event)
        where = f"line {line}, column {column}"
        found = self._anchors.get(event.anchor)  # type: ignore[arg-type]
        if found is None:
            if any(collection.anchor == event.anchor for collection in self._stack):
                raise ParseError(f"invalid YAML: {where}: recursive alias")
            raise ParseError(f"invalid YAML: {where}: found undefined alias {event.anchor!r}")
        value, decodes, size, height = found
        # go-yaml decodes the alias node, then the anchored node's every node again, through the alias; its
        # ratio only grows while an alias is expanded, so checking after each one is checking after each node.
        self._decodes += 1 + decodes
        self._alias_decodes += decodes
        if (self._alias_decodes > 100 and self._decodes > 1000
                and self._alias_decodes / self._decodes > allowed_alias_ratio(self._decodes)):
            raise _DecodeError(f"{EXCESSIVE_ALIASING} (at line {line}, column {column}: aliases made "
                               f"{self._alias_decodes} of the {self._decodes} nodes decoded; alias bomb?)")
        if isinstance(value, Resolved):
            return self._converted(value, event, as_key=self._expects_key()), 0
        if len(self._stack) + height > MAX_DEPTH:
            raise ParseError(f"invalid YAML: {_too_deep(line, column)}")
        self._count(size)
        copied = copy_json(value)
        self._register_copies(value, copied)
        return copied, height

    def _register_copies(self, original: Any, copied: Any) -> None:
        """The entries of every map of an alias's copy are those of the map it copies (merges read them)."""
        pending = [(original, copied)]
        while pending:
            source, target = pending.pop()
            if isinstance(source, dict):
                if id(source) in self._entries:
                    self._entries[id(target)] = self._entries[id(source)]
                pending.extend((source[key], target[key]) for key in source if isinstance(source[key], dict | list))
            elif isinstance(source, list):
                pending.extend((item, target[index]) for index, item in enumerate(source)
                               if isinstance(item, dict | list))

    def _add(self, value: Any, height: int, event: Event) -> None:
        collection = self._stack[-1]
        collection.height = max(collection.height, height)
        container = collection.value
        if isinstance(container, list):
            container.append(value)
        elif collection.state == 0:
            if not isinstance(value, str):
                raise _DecodeError(f"invalid YAML: line {_position(event)[0]}: "
                                   f"unsupported map key {_shown_key(value)} (a map or a list)")
            collection.key = value
            collection.key_line = _position(event)[0]
            collection.state = 1
        elif collection.state == 2:
            # decode.go merge: each merged map (a list's from its last) is decoded into this one, key by key.
            for source in reversed(value) if isinstance(value, list) else [value]:
                if not isinstance(source, dict):
                    raise _DecodeError("invalid YAML: map merge requires map or sequence of maps as the value")
                for identity, shown, key, line in self._entries.get(id(source), ()):
                    self._set(collection, identity, shown, key, line, copy_json(source[key]))
            collection.state = 0
        else:
            self._set(collection, collection.key_identity, collection.key_shown, collection.key,
                      _position(event)[0] if not isinstance(value, dict | list) else collection.key_line, value)
            collection.state = 0

    @staticmethod
    def _set(collection: _Collection, identity: tuple[str, Any], shown: str, key: str, line: int,
             value: Any) -> None:
        """decode.go ``setMapIndex`` under strict decoding: a key go-yaml's map already holds is an error; keys
        that only meet as JSON strings are two keys there, and the later one stays here."""
        if identity in collection.go_keys:
            raise _DecodeError(f"yaml: unmarshal errors:\n  line {line}: key {shown} already set in map")
        collection.go_keys.add(identity)
        collection.entries.append((identity, shown, key, line))
        assert isinstance(collection.value, dict)
        collection.value.pop(key, None)
        collection.value[key] = value


def _position(event: Event) -> tuple[int, int, int]:
    """Line and column (1-based) and character index where an event starts."""
    mark = event.start_mark
    return (mark.line + 1, mark.column + 1, mark.index) if mark is not None else (0, 0, 0)


def _shown_key(key: Any) -> str:
    text = json.dumps(key, default=str) if isinstance(key, dict | list) else repr(key)
    return text if len(text) <= 100 else text[:100] + "..."


def copy_json(value: Any) -> Any:
    """A deep copy of a JSON-like value (dicts, lists, immutable leaves), plain dicts and lists all through, so any
    value this module returns can be copied (copy.deepcopy takes two frames a level and a memo entry a container).
    Each use of a YAML alias is such a copy: a caller changing one must not change the others. A Kubernetes object
    is copied level by level (about half the time of the loop below, which mutations that retype a Pod pay twice);
    what lies past ``_RECURSIVE_COPY_DEPTH`` levels, and any subclass of dict or list, is copied by that loop, which
    never recurses."""
    cls = value.__class__
    if cls is dict or cls is list:
        return _copied(value, _RECURSIVE_COPY_DEPTH)
    return _copy_iteratively(value)


#: How deep ``copy_json`` recurses (frames of Python's stack) before copying the rest without recursion.
_RECURSIVE_COPY_DEPTH = 64


def _copied(value: dict[Any, Any] | list[Any], depth: int) -> Any:
    if isinstance(value, dict):
        copied: dict[Any, Any] = {}
        for key, child in value.items():
            cls = child.__class__
            if cls is dict or cls is list:
                child = _copied(child, depth - 1) if depth else _copy_iteratively(child)
            elif cls is not str and isinstance(child, dict | list):
                child = _copy_iteratively(child)
            copied[key] = child
        return copied
    items = []
    for child in value:
        cls = child.__class__
        if cls is dict or cls is list:
            child = _copied(child, depth - 1) if depth else _copy_iteratively(child)
        elif cls is not str and isinstance(child, dict | list):
            child = _copy_iteratively(child)
        items.append(child)
    return items


def _copy_iteratively(value: Any) -> Any:
    if not isinstance(value, dict | list):
        return value
    root: Any = {} if isinstance(value, dict) else []
    pending: list[tuple[Any, Any]] = [(value, root)]
    while pending:
        original, copy = pending.pop()
        for key, child in (original.items() if isinstance(original, dict) else enumerate(original)):
            if isinstance(child, dict | list):
                child_copy: Any = {} if isinstance(child, dict) else []
                pending.append((child, child_copy))
                child = child_copy
            if isinstance(copy, dict):
                copy[key] = child
            else:
                copy.append(child)
    return root
