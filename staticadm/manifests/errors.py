"""Error values for manifest loading: every problem is data, never an exception to the caller."""

from __future__ import annotations

from dataclasses import dataclass

#: Longest message or name an error keeps: a manifest can carry megabytes in one field (a name, an
#: expression), and each error is logged and shown; the start is what locates the problem.
MAX_ERROR_TEXT = 4096


def _bounded(text: str, limit: int = MAX_ERROR_TEXT) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters)"


@dataclass(frozen=True, slots=True)
class ManifestError:
    """One problem with the manifest directory.

    ``message`` carries Kubernetes' wording where kube-apiserver has one (field errors read
    ``<path>: Invalid value: ...``), so an operator can match it against apiserver logs; the other
    fields locate it.
    """

    path: str
    message: str
    #: Index of the non-empty document within the file; None for file- or directory-level errors.
    document: int | None = None
    #: Indexes into enclosing Lists' ``items``, outermost first.
    items: tuple[int, ...] = ()
    kind: str = ""
    name: str = ""
    #: Field path inside the object, e.g. ``spec.validations[0].expression``; "" when not a field.
    field: str = ""
    #: The read failed for want of a resource (file descriptors, memory) whose return no file event
    #: announces: the directory watcher tries again, rather than waiting for a change or a poll.
    transient: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "message", _bounded(self.message))
        object.__setattr__(self, "name", _bounded(self.name, 256))

    def location(self) -> str:
        where = self.path
        if self.document is not None:
            where += f" (document {self.document}"
            for index in self.items:
                where += f", item {index}"
            where += ")"
        return where

    def subject(self) -> str:
        if not self.kind:
            return ""
        return f'{self.kind} "{self.name}"' if self.name else self.kind

    def __str__(self) -> str:
        subject = self.subject()
        return f"{self.location()}: {subject}: {self.message}" if subject else f"{self.location()}: {self.message}"

    def to_json(self) -> dict[str, object]:
        return {
            "file": self.path,
            "document": self.document,
            "items": list(self.items),
            "kind": self.kind,
            "name": self.name,
            "field": self.field,
            "message": self.message,
        }


@dataclass(frozen=True, slots=True)
class FieldError:
    """A Kubernetes ``field.Error``: rendered exactly as apimachinery renders it."""

    field: str
    type: str
    detail: str = ""
    #: Already formatted bad value (Go's %q / %v / %#v rendering), or None when the type omits it.
    value: str | None = None

    def __str__(self) -> str:
        body = self.type
        if self.value is not None:
            body += f": {self.value}"
        if self.detail:
            body += f": {self.detail}"
        return f"{self.field}: {body}"
