"""Splitting a file into documents as kube-apiserver's loader does.

Splitting follows apimachinery's ``yaml.NewYAMLReader`` (a line starting with ``---`` ends a
document; only spaces or a comment may follow it on that line), then ``TrimSpace``, dropping empty
documents, exactly as kube-apiserver does, so document indexes match what it would report. Each
document is then parsed by :func:`staticadm.yamljson.parse_document`.
"""

from __future__ import annotations

from dataclasses import dataclass

from staticadm import gofmt


class DocumentError(Exception):
    """A file that cannot be split into documents; the message is shown to the operator."""


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
            rest = gofmt.trim_space(line[3:])
            if rest and not rest.startswith("#"):
                raise DocumentError(f"invalid Yaml document separator: {rest}")
            documents.append("".join(buffer))
            buffer = []
            continue
        buffer.append(line)
    documents.append("".join(buffer))
    # Go's bytes.TrimSpace (unicode.IsSpace: U+001C..U+001F are kept, unlike str.strip()).
    trimmed = [gofmt.trim_space(doc) for doc in documents]
    return [Document(i, doc) for i, doc in enumerate(d for d in trimmed if d)]
