"""Kubernetes' CEL regex library (``k8s.io/apiserver/pkg/cel/library/regex.go``): ``find``/``findAll``.

Kubernetes compiles patterns with Go's ``regexp`` (RE2 syntax, leftmost-first matching). Python's ``re``
has the same match semantics but a different syntax, so ``translate`` parses the pattern the way Go's
``regexp/syntax`` does (Perl flags), reports Go's error for anything Go rejects, and emits an
equivalent Python pattern spelled out explicitly (ASCII ``\\d \\w \\s \\b``, ``$`` as end of text,
``(?U)``, ``\\Q..\\E``, ``\\x{..}``, Unicode general categories, POSIX classes).

Limits: Unicode *script* classes such as ``\\p{Greek}`` need tables Python does not ship, so they are
reported as errors; and Python's backtracking matcher is not linear-time like RE2.
"""

from __future__ import annotations

import re
import sys
import unicodedata
from dataclasses import dataclass, field
from functools import cache

from staticadm.cel.libraries.spec import CelFunctionError, Function, Overload

_MAX_RUNE = 0x10FFFF
_MAX_REPEAT = 1000
_MAX_NESTING = 1000

Ranges = list[tuple[int, int]]


class RegexSyntaxError(ValueError):
    """Go's ``*syntax.Error`` text: ``error parsing regexp: <code>: `<expr>` ``."""

    def __init__(self, code: str, expr: str) -> None:
        super().__init__(f"error parsing regexp: {code}: `{expr}`")


_ERR_MISSING_BRACKET = "missing closing ]"
_ERR_MISSING_PAREN = "missing closing )"
_ERR_UNEXPECTED_PAREN = "unexpected )"
_ERR_INVALID_ESCAPE = "invalid escape sequence"
_ERR_INVALID_CHAR_RANGE = "invalid character class range"
_ERR_INVALID_NAMED_CAPTURE = "invalid named capture"
_ERR_INVALID_PERL_OP = "invalid or unsupported Perl syntax"
_ERR_INVALID_REPEAT_OP = "invalid nested repetition operator"
_ERR_INVALID_REPEAT_SIZE = "invalid repeat count"
_ERR_MISSING_REPEAT_ARGUMENT = "missing argument to repetition operator"
_ERR_TRAILING_BACKSLASH = "trailing backslash at end of expression"
_ERR_NESTING_DEPTH = "expression nests too deeply"

_PERL_CLASSES: dict[str, Ranges] = {
    "d": [(0x30, 0x39)],
    "s": [(0x09, 0x0A), (0x0C, 0x0D), (0x20, 0x20)],
    "w": [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)],
}
_POSIX_CLASSES: dict[str, Ranges] = {
    "alnum": [(0x30, 0x39), (0x41, 0x5A), (0x61, 0x7A)],
    "alpha": [(0x41, 0x5A), (0x61, 0x7A)],
    "ascii": [(0x00, 0x7F)],
    "blank": [(0x09, 0x09), (0x20, 0x20)],
    "cntrl": [(0x00, 0x1F), (0x7F, 0x7F)],
    "digit": [(0x30, 0x39)],
    "graph": [(0x21, 0x7E)],
    "lower": [(0x61, 0x7A)],
    "print": [(0x20, 0x7E)],
    "punct": [(0x21, 0x2F), (0x3A, 0x40), (0x5B, 0x60), (0x7B, 0x7E)],
    "space": [(0x09, 0x0D), (0x20, 0x20)],
    "upper": [(0x41, 0x5A)],
    "word": [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)],
    "xdigit": [(0x30, 0x39), (0x41, 0x46), (0x61, 0x66)],
}
_WORD = "[0-9A-Za-z_]"
_WORD_BOUNDARY = f"(?:(?<={_WORD})(?!{_WORD})|(?<!{_WORD})(?={_WORD}))"
_NOT_WORD_BOUNDARY = f"(?:(?<={_WORD})(?={_WORD})|(?<!{_WORD})(?!{_WORD}))"


def _normalize(ranges: Ranges) -> Ranges:
    merged: Ranges = []
    for lo, hi in sorted(ranges):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


def _negate(ranges: Ranges) -> Ranges:
    result: Ranges = []
    next_lo = 0
    for lo, hi in _normalize(ranges):
        if lo > next_lo:
            result.append((next_lo, lo - 1))
        next_lo = hi + 1
    if next_lo <= _MAX_RUNE:
        result.append((next_lo, _MAX_RUNE))
    return result


@cache
def _category_ranges(name: str) -> tuple[tuple[int, int], ...]:
    """Code point ranges of a Unicode general category ("L", "Lu", ...) from ``unicodedata``."""
    ranges: Ranges = []
    start = -1
    for code in range(sys.maxunicode + 1):
        matches = unicodedata.category(chr(code)).startswith(name)
        if matches and start < 0:
            start = code
        elif not matches and start >= 0:
            ranges.append((start, code - 1))
            start = -1
    if start >= 0:
        ranges.append((start, sys.maxunicode))
    return tuple(ranges)


_CATEGORIES = frozenset(
    {
        *("C", "Cc", "Cf", "Co", "Cs", "L", "Ll", "Lm", "Lo", "Lt", "Lu", "M", "Mc", "Me", "Mn", "N", "Nd"),
        *("Nl", "No", "P", "Pc", "Pd", "Pe", "Pf", "Pi", "Po", "Ps", "S", "Sc", "Sk", "Sm", "So", "Z", "Zl"),
        *("Zp", "Zs"),
    }
)


def _unicode_class(name: str) -> Ranges | None:
    if name == "Any":
        return [(0, _MAX_RUNE)]
    if name in _CATEGORIES:
        return list(_category_ranges(name))
    return None


def _class_char(code: int) -> str:
    return f"\\U{code:08x}" if code > 0xFFFF else f"\\u{code:04x}"


def _class_pattern(ranges: Ranges, negated: bool) -> str:
    items = []
    for lo, hi in _normalize(ranges):
        items.append(_class_char(lo) if lo == hi else f"{_class_char(lo)}-{_class_char(hi)}")
    body = "".join(items)
    if not body:
        # An empty class never matches; its negation matches any character.
        return "(?s:.)" if negated else "(?!)"
    return f"[^{body}]" if negated else f"[{body}]"


@dataclass
class _Node:
    """A parsed piece: the Python text for it and the largest repeat count nested inside."""

    text: str
    repeat_factor: int = 1
    is_repeat: bool = False
    pseudo: str = ""  # "(" or "|" for stack markers, like Go's opLeftParen/opVerticalBar


@dataclass
class _Flags:
    fold: bool = False
    multi_line: bool = False
    dot_nl: bool = False
    non_greedy: bool = False


@dataclass
class _Paren:
    flags: _Flags
    name: str | None
    start: int
    alternatives: list[list[_Node]] = field(default_factory=list)


class _Parser:
    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self.pos = 0
        self.flags = _Flags()

    # -- helpers -----------------------------------------------------------------------------------

    def _peek(self, offset: int = 0) -> str:
        index = self.pos + offset
        return self.pattern[index] if index < len(self.pattern) else ""

    def _wrap_fold(self, text: str) -> str:
        return f"(?i:{text})" if self.flags.fold else text

    def _literal(self, code: int) -> _Node:
        return _Node(self._wrap_fold(re.escape(chr(code))))

    # -- escapes -----------------------------------------------------------------------------------

    def _parse_escape(self) -> int:
        """Go's ``parseEscape``; ``self.pos`` is at the backslash."""
        start = self.pos
        self.pos += 1
        if self.pos >= len(self.pattern):
            raise RegexSyntaxError(_ERR_TRAILING_BACKSLASH, "")
        c = self.pattern[self.pos]
        self.pos += 1

        def invalid() -> RegexSyntaxError:
            return RegexSyntaxError(_ERR_INVALID_ESCAPE, self.pattern[start : self.pos])

        if c.isascii() and not c.isalnum():
            return ord(c)
        if c in "1234567" and not ("0" <= self._peek() <= "7"):
            raise invalid()
        if c in "01234567":
            value = int(c)
            for _ in range(2):
                if not ("0" <= self._peek() <= "7"):
                    break
                value = value * 8 + int(self._peek())
                self.pos += 1
            return value
        if c == "x":
            if self.pos >= len(self.pattern):
                raise invalid()
            c = self.pattern[self.pos]
            self.pos += 1
            if c == "{":
                digits = 0
                value = 0
                while True:
                    if self.pos >= len(self.pattern):
                        raise invalid()
                    c = self.pattern[self.pos]
                    self.pos += 1
                    if c == "}":
                        break
                    if c not in "0123456789abcdefABCDEF":
                        raise invalid()
                    value = value * 16 + int(c, 16)
                    if value > _MAX_RUNE:
                        raise invalid()
                    digits += 1
                if digits == 0:
                    raise invalid()
                return value
            if self.pos >= len(self.pattern):
                raise invalid()
            second = self.pattern[self.pos]
            self.pos += 1
            hexdigits = "0123456789abcdefABCDEF"
            if c not in hexdigits or second not in hexdigits:
                raise invalid()
            return int(c + second, 16)
        simple = {"a": 7, "f": 12, "n": 10, "r": 13, "t": 9, "v": 11}
        if c in simple:
            return simple[c]
        raise invalid()

    def _unicode_escape(self) -> Ranges | None:
        """``\\pN``, ``\\p{Name}``, ``\\PN``, ``\\p{^Name}`` at ``self.pos``; None if not one."""
        if self._peek() != "\\" or self._peek(1) not in ("p", "P"):
            return None
        start = self.pos
        negate = self._peek(1) == "P"
        self.pos += 2
        if self.pos >= len(self.pattern):
            raise RegexSyntaxError(_ERR_INVALID_CHAR_RANGE, self.pattern[start:])
        if self._peek() == "{":
            end = self.pattern.find("}", self.pos)
            if end < 0:
                raise RegexSyntaxError(_ERR_INVALID_CHAR_RANGE, self.pattern[start:])
            name = self.pattern[self.pos + 1 : end]
            self.pos = end + 1
        else:
            name = self._peek()
            self.pos += 1
        if name.startswith("^"):
            negate = not negate
            name = name[1:]
        ranges = _unicode_class(name)
        if ranges is None:
            raise RegexSyntaxError(_ERR_INVALID_CHAR_RANGE, self.pattern[start : self.pos])
        return _negate(ranges) if negate else ranges

    def _perl_class(self) -> Ranges | None:
        if self._peek() != "\\" or self._peek(1).lower() not in _PERL_CLASSES:
            return None
        letter = self._peek(1)
        self.pos += 2
        ranges = _PERL_CLASSES[letter.lower()]
        return _negate(ranges) if letter.isupper() else list(ranges)

    # -- character classes -------------------------------------------------------------------------

    def _parse_class(self) -> _Node:
        start = self.pos
        self.pos += 1  # '['
        negated = False
        if self._peek() == "^":
            negated = True
            self.pos += 1
        ranges: Ranges = []
        first = True
        while self.pos < len(self.pattern) and (self._peek() != "]" or first):
            # A leading ']' is a literal; with Perl flags a '-' may appear anywhere.
            first = False
            if self._peek() == "[" and self._peek(1) == ":":
                end = self.pattern.find(":]", self.pos + 2)
                if end >= 0:
                    name = self.pattern[self.pos + 2 : end]
                    posix_negate = name.startswith("^")
                    posix = _POSIX_CLASSES.get(name.lstrip("^"))
                    if posix is None:
                        raise RegexSyntaxError(_ERR_INVALID_CHAR_RANGE, self.pattern[self.pos : end + 2])
                    ranges += _negate(posix) if posix_negate else posix
                    self.pos = end + 2
                    continue
            unicode_ranges = self._unicode_escape()
            if unicode_ranges is not None:
                ranges += unicode_ranges
                continue
            perl = self._perl_class()
            if perl is not None:
                ranges += perl
                continue
            range_start = self.pos
            lo = self._class_char()
            hi = lo
            if self._peek() == "-" and self._peek(1) not in ("", "]"):
                self.pos += 1
                hi = self._class_char()
                if hi < lo:
                    raise RegexSyntaxError(_ERR_INVALID_CHAR_RANGE, self.pattern[range_start : self.pos])
            ranges.append((lo, hi))
        if self.pos >= len(self.pattern):
            raise RegexSyntaxError(_ERR_MISSING_BRACKET, self.pattern[start:])
        self.pos += 1  # ']'
        return _Node(self._wrap_fold(_class_pattern(ranges, negated)))

    def _class_char(self) -> int:
        if self._peek() == "\\":
            return self._parse_escape()
        code = ord(self._peek())
        self.pos += 1
        return code

    # -- the main loop -----------------------------------------------------------------------------

    def parse(self) -> str:
        stack: list[_Paren] = [_Paren(self.flags, None, 0, [[]])]
        repeat_start = -1
        while self.pos < len(self.pattern):
            current = stack[-1].alternatives[-1]
            c = self._peek()
            op_start = self.pos
            previous_repeat_start, repeat_start = repeat_start, -1
            if c == "(":
                if len(stack) >= _MAX_NESTING:
                    raise RegexSyntaxError(_ERR_NESTING_DEPTH, self.pattern)
                if self._peek(1) == "?":
                    opened = self._parse_perl_flags(stack)
                    if opened is None:
                        continue
                    stack.append(opened)
                else:
                    self.pos += 1
                    stack.append(_Paren(_Flags(**vars(self.flags)), None, op_start, [[]]))
                continue
            if c == "|":
                self.pos += 1
                stack[-1].alternatives.append([])
                continue
            if c == ")":
                self.pos += 1
                if len(stack) == 1:
                    raise RegexSyntaxError(_ERR_UNEXPECTED_PAREN, self.pattern)
                closed = stack.pop()
                self.flags = closed.flags
                body = "|".join("".join(n.text for n in alt) for alt in closed.alternatives)
                factor = max((n.repeat_factor for alt in closed.alternatives for n in alt), default=1)
                stack[-1].alternatives[-1].append(_Node(f"(?:{body})", factor))
                continue
            if c in "*+?" or (c == "{" and self._repeat_bounds() is not None):
                self._apply_repeat(current, op_start, previous_repeat_start)
                repeat_start = op_start
                continue
            if c == "^":
                self.pos += 1
                current.append(_Node("(?m:^)" if self.flags.multi_line else r"\A"))
            elif c == "$":
                self.pos += 1
                current.append(_Node("(?m:$)" if self.flags.multi_line else r"\Z"))
            elif c == ".":
                self.pos += 1
                current.append(_Node("(?s:.)" if self.flags.dot_nl else "[^\\n]"))
            elif c == "[":
                current.append(self._parse_class())
            elif c == "\\":
                current.extend(self._parse_backslash())
            else:
                self.pos += 1
                current.append(self._literal(ord(c)))
        if len(stack) > 1:
            raise RegexSyntaxError(_ERR_MISSING_PAREN, self.pattern)
        return "|".join("".join(n.text for n in alt) for alt in stack[0].alternatives)

    def _parse_backslash(self) -> list[_Node]:
        nxt = self._peek(1)
        assertions = {"A": r"\A", "z": r"\Z", "b": _WORD_BOUNDARY, "B": _NOT_WORD_BOUNDARY}
        if nxt in assertions:
            self.pos += 2
            return [_Node(assertions[nxt])]
        if nxt == "Q":
            self.pos += 2
            end = self.pattern.find("\\E", self.pos)
            literal = self.pattern[self.pos :] if end < 0 else self.pattern[self.pos : end]
            self.pos = len(self.pattern) if end < 0 else end + 2
            return [self._literal(ord(ch)) for ch in literal]
        unicode_ranges = self._unicode_escape()
        if unicode_ranges is not None:
            return [_Node(self._wrap_fold(_class_pattern(unicode_ranges, False)))]
        perl = self._perl_class()
        if perl is not None:
            return [_Node(self._wrap_fold(_class_pattern(perl, False)))]
        return [self._literal(self._parse_escape())]

    def _parse_perl_flags(self, stack: list[_Paren]) -> _Paren | None:
        """Handles ``(?`` at ``self.pos``: a named group or flags. Returns a group to open, or None."""
        start = self.pos
        rest = self.pattern[start:]
        # Go (1.22+) accepts (?P<name> and (?<name>; lookbehinds therefore fail as bad names.
        starts_with_p = len(rest) > 4 and rest.startswith("(?P<")
        if starts_with_p or (len(rest) > 3 and rest.startswith("(?<")):
            begin = 4 if starts_with_p else 3
            end = rest.find(">")
            if end < 0:
                raise RegexSyntaxError(_ERR_INVALID_NAMED_CAPTURE, rest)
            name = rest[begin:end]
            if not name or not all(ch == "_" or (ch.isascii() and ch.isalnum()) for ch in name):
                raise RegexSyntaxError(_ERR_INVALID_NAMED_CAPTURE, rest[: end + 1])
            self.pos = start + end + 1
            return _Paren(_Flags(**vars(self.flags)), name, start, [[]])

        self.pos += 2
        flags = _Flags(**vars(self.flags))
        sign = 1
        saw_flag = False
        while self.pos < len(self.pattern):
            c = self.pattern[self.pos]
            self.pos += 1
            if c in "imsU":
                value = sign > 0
                if c == "i":
                    flags.fold = value
                elif c == "m":
                    flags.multi_line = value
                elif c == "s":
                    flags.dot_nl = value
                else:
                    flags.non_greedy = value
                saw_flag = True
                continue
            if c == "-" and sign > 0:
                sign = -1
                saw_flag = False
                continue
            if c in ":)" and (sign > 0 or saw_flag):
                if c == ":":
                    opened = _Paren(_Flags(**vars(self.flags)), None, start, [[]])
                    self.flags = flags
                    return opened
                self.flags = flags
                return None
            break
        raise RegexSyntaxError(_ERR_INVALID_PERL_OP, self.pattern[start : self.pos])

    def _repeat_bounds(self) -> tuple[int, int, int] | None:
        """Go's ``parseRepeat`` at ``self.pos``: (min, max or -1, end), or None if ``{`` is literal."""
        match = re.match(r"\{(\d+)(,(\d*))?\}", self.pattern[self.pos :])
        if match is None:
            return None
        low_text, has_comma, high_text = match.group(1), match.group(2), match.group(3)
        for number in (low_text, high_text or ""):
            if len(number) >= 2 and number[0] == "0":
                return None
        low = int(low_text) if len(low_text) <= 9 else -1
        if not has_comma:
            high = low
        elif not high_text:
            high = -1
        else:
            high = int(high_text) if len(high_text) <= 9 else -2
            if high == -2:
                low = -1
        return low, high, self.pos + match.end()

    def _apply_repeat(self, current: list[_Node], op_start: int, previous_repeat_start: int) -> None:
        c = self._peek()
        if c == "{":
            bounds = self._repeat_bounds()
            assert bounds is not None
            low, high, end = bounds
            self.pos = end
            if low < 0 or low > _MAX_REPEAT or high > _MAX_REPEAT or (high >= 0 and low > high):
                raise RegexSyntaxError(_ERR_INVALID_REPEAT_SIZE, self.pattern[op_start : self.pos])
            quantifier = f"{{{low}}}" if low == high else f"{{{low},{'' if high < 0 else high}}}"
            count = high if high > 0 else low
        else:
            self.pos += 1
            quantifier = c
            low, high, count = (0, -1, 1) if c == "*" else (1, -1, 1) if c == "+" else (0, 1, 1)
        greedy = not self.flags.non_greedy
        if self._peek() == "?":
            self.pos += 1
            greedy = not greedy
        if previous_repeat_start >= 0:
            raise RegexSyntaxError(_ERR_INVALID_REPEAT_OP, self.pattern[previous_repeat_start : self.pos])
        if not current:
            raise RegexSyntaxError(_ERR_MISSING_REPEAT_ARGUMENT, self.pattern[op_start : self.pos])
        sub = current.pop()
        factor = sub.repeat_factor
        if c == "{" and (low >= 2 or high >= 2):
            if count > 0:
                factor *= count
            if factor > _MAX_REPEAT:
                raise RegexSyntaxError(_ERR_INVALID_REPEAT_SIZE, self.pattern[op_start : self.pos])
        text = f"(?:{sub.text}){quantifier}{'' if greedy else '?'}"
        current.append(_Node(text, factor, is_repeat=True))


@cache
def translate(pattern: str) -> re.Pattern[str]:
    """Compiles a Go RE2 pattern to an equivalent Python pattern; raises ``RegexSyntaxError``."""
    return re.compile(_Parser(pattern).parse())


def compile_error(pattern: str) -> str | None:
    """Go's ``regexp.Compile`` error text for ``pattern`` (what Kubernetes reports when a literal
    pattern fails at program creation), or None if the pattern is valid."""
    try:
        translate(pattern)
    except RegexSyntaxError as err:
        return str(err)
    except re.error as err:
        return f"error parsing regexp: {err}"
    return None


def _compiled(pattern: str) -> re.Pattern[str]:
    error = compile_error(pattern)
    if error is not None:
        raise CelFunctionError(f"Illegal regex: {error}")
    return translate(pattern)


def find_all_matches(compiled: re.Pattern[str], text: str, limit: int) -> list[str]:
    """Go's ``Regexp.FindAllString``: an empty match right after a previous match is skipped."""
    if limit < 0:
        limit = len(text) + 1
    results: list[str] = []
    pos = 0
    previous_end = -1
    while len(results) < limit and pos <= len(text):
        match = compiled.search(text, pos)
        if match is None:
            break
        accept = True
        if match.end() == pos:
            if match.start() == previous_end:
                accept = False
            pos += 1
        else:
            pos = match.end()
        previous_end = match.end()
        if accept:
            results.append(match.group(0))
    return results


def find(text: str, pattern: str) -> str:
    match = _compiled(pattern).search(text)
    return match.group(0) if match else ""


def find_all(text: str, pattern: str, limit: int = -1) -> list[str]:
    compiled = _compiled(pattern)
    if limit == 0:
        return []
    return find_all_matches(compiled, text, limit)


FUNCTIONS = (
    Function("find", (Overload("string_find_string", ("string", "string"), "string", find, member=True),)),
    Function(
        "findAll",
        (
            Overload("string_find_all_string", ("string", "string"), "list(string)", find_all, member=True),
            Overload(
                "string_find_all_string_int",
                ("string", "string", "int"),
                "list(string)",
                find_all,
                member=True,
            ),
        ),
    ),
)
