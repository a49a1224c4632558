"""Kubernetes' CEL regex library (``k8s.io/apiserver/pkg/cel/library/regex.go``): ``find``/``findAll``.

Kubernetes compiles patterns with Go's ``regexp``: RE2 syntax, leftmost-first matching, and time linear
in the input, so no pattern can make a request backtrack for seconds. We match with RE2 itself
(``google-re2``), which has the same semantics. Go's parser and RE2's C++ parser differ in details
(error texts, the Unicode class names Go 1.25 added, a few escapes), so ``_Parser`` parses the pattern
the way Go's ``regexp/syntax`` does (Perl flags), reports Go's error for anything Go rejects, and emits
the same regular expression in a small, explicit subset of RE2 syntax (every literal as ``\\x{..}``,
``$`` as ``\\z``, named groups as plain groups, Unicode classes resolved by Go's rules).

Matching runs on UTF-8 bytes: Go's ``FindAllString`` loop (skip an empty match right after a match,
step one code point past an empty match) over RE2 byte offsets, so ``findAll`` is linear too.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache, lru_cache

import re2

from staticadm.cel.libraries.spec import CelFunctionError, Function, Overload

_MAX_RUNE = 0x10FFFF
_MAX_REPEAT = 1000
_MAX_NESTING = 1000
#: RE2's memory budget per pattern. Go accepts ``\pL{1000}`` (1,000 instructions for Go, ~1.2 million
#: byte-level instructions for RE2, which needs ~20 MiB to compile it); RE2's 8 MiB default refuses it.
_RE2_MAX_MEM = 64 << 20
#: Patterns compiled at run time (from request data) are cached by text; literal patterns are few.
_COMPILED_CACHE_SIZE = 64

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

#: Perl classes (``\d \s \w`` and negations) and POSIX classes mean the same ASCII sets in Go and RE2.
_PERL_CLASS_LETTERS = frozenset("dDsSwW")
_POSIX_CLASSES = frozenset(
    {"alnum", "alpha", "ascii", "blank", "cntrl", "digit", "graph", "lower", "print", "punct", "space", "upper",
     "word", "xdigit"}
)

#: ``unicode.Categories`` keys (Go 1.25+ adds ``Cn`` and ``LC``; ``LC`` is special-cased below).
_CATEGORIES = frozenset(
    {
        *("C", "Cc", "Cf", "Co", "Cs", "L", "Ll", "Lm", "Lo", "Lt", "Lu", "M", "Mc", "Me", "Mn", "N", "Nd"),
        *("Nl", "No", "P", "Pc", "Pd", "Pe", "Pf", "Pi", "Po", "Ps", "S", "Sc", "Sk", "Sm", "So", "Z", "Zl"),
        *("Zp", "Zs"),
    }
)
#: ``unicode.CategoryAliases`` (Go 1.25+), the Unicode long names of the categories.
_CATEGORY_ALIASES = {
    "Cased_Letter": "LC", "Close_Punctuation": "Pe", "Combining_Mark": "M", "Connector_Punctuation": "Pc",
    "Control": "Cc", "Currency_Symbol": "Sc", "Dash_Punctuation": "Pd", "Decimal_Number": "Nd",
    "Enclosing_Mark": "Me", "Final_Punctuation": "Pf", "Format": "Cf", "Initial_Punctuation": "Pi",
    "Letter": "L", "Letter_Number": "Nl", "Line_Separator": "Zl", "Lowercase_Letter": "Ll", "Mark": "M",
    "Math_Symbol": "Sm", "Modifier_Letter": "Lm", "Modifier_Symbol": "Sk", "Nonspacing_Mark": "Mn",
    "Number": "N", "Open_Punctuation": "Ps", "Other": "C", "Other_Letter": "Lo", "Other_Number": "No",
    "Other_Punctuation": "Po", "Other_Symbol": "So", "Paragraph_Separator": "Zp", "Private_Use": "Co",
    "Punctuation": "P", "Separator": "Z", "Space_Separator": "Zs", "Spacing_Mark": "Mc", "Surrogate": "Cs",
    "Symbol": "S", "Titlecase_Letter": "Lt", "Unassigned": "Cn", "Uppercase_Letter": "Lu", "cntrl": "Cc",
    "digit": "Nd", "punct": "P",
}


def _re2_options() -> re2.Options:
    options = re2.Options()
    options.max_mem = _RE2_MAX_MEM
    options.log_errors = False
    return options


_OPTIONS = _re2_options()


def _canonical_name(name: str) -> str:
    """Go's ``regexp/syntax.canonicalName``: first letter upper case, the rest lower, no ``_ -`` or spaces."""
    out = []
    first = True
    for char in name:
        if char in "_- ":
            continue
        if first:
            first = False
            if "a" <= char <= "z":
                char = char.upper()
        elif "A" <= char <= "Z":
            char = char.lower()
        out.append(char)
    return "".join(out)


_CANONICAL_ALIASES = {_canonical_name(alias): actual for alias, actual in _CATEGORY_ALIASES.items()}


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
def _ranges_of(re2_class: str) -> tuple[tuple[int, int], ...]:
    """The code points RE2's ``re2_class`` holds, read off RE2's own tables (one linear scan)."""
    every_char = "".join(chr(code) for code in range(_MAX_RUNE + 1) if not 0xD800 <= code <= 0xDFFF)
    runs = re2.compile(f"{re2_class}+", _OPTIONS).finditer(every_char)
    return tuple((ord(run.group(0)[0]), ord(run.group(0)[-1])) for run in runs)


def _unassigned() -> Ranges:
    """``unicode.Cn``: what no other general category holds (RE2 has no ``\\p{Cn}``)."""
    return list(_ranges_of(r"[^\pL\pM\pN\pP\pS\pZ\p{Cc}\p{Cf}\p{Co}\p{Cs}]"))


@lru_cache(maxsize=256)
def _is_script(name: str) -> bool:
    try:
        re2.compile(f"\\p{{{name}}}", _OPTIONS)
    except re2.error:
        return False
    return True


def _ranges_atoms(ranges: Ranges) -> list[str]:
    return [_char(lo) if lo == hi else f"{_char(lo)}-{_char(hi)}" for lo, hi in _normalize(ranges)]


def _unicode_class_atoms(name: str, negate: bool) -> list[str] | None:
    """Go 1.25+'s ``unicodeTable``: ``\\p{name}`` as RE2 class items, or None if Go knows no such class."""
    canonical = _canonical_name(name)
    ranges: Ranges | None = None
    if canonical == "Any":
        ranges = [(0, _MAX_RUNE)]
    elif canonical == "Assigned":
        ranges = _negate(_unassigned())
    elif canonical == "Ascii":
        ranges = [(0, 0x7F)]
    elif canonical in ("Lc", "Cn"):
        ranges = list(_ranges_of(r"[\p{Lu}\p{Ll}\p{Lt}]")) if canonical == "Lc" else _unassigned()
    elif canonical in _CATEGORIES or (canonical not in _CANONICAL_ALIASES and _is_script(canonical)):
        return [f"\\{'P' if negate else 'p'}{{{canonical}}}"]
    elif canonical in _CANONICAL_ALIASES:
        return _unicode_class_atoms(_CANONICAL_ALIASES[canonical], negate)
    else:
        return None
    return _ranges_atoms(_negate(ranges) if negate else ranges)


def _char(code: int) -> str:
    """One code point in RE2 syntax: ASCII letters and digits as themselves, everything else as ``\\x{..}``."""
    char = chr(code)
    return char if char.isascii() and char.isalnum() else f"\\x{{{code:X}}}"


_NEVER = r"[^\x00-\x{10FFFF}]"


def _class_pattern(atoms: list[str], negated: bool) -> str:
    body = "".join(atoms)
    if not body:
        # An empty class never matches; its negation matches any character.
        return "(?s:.)" if negated else _NEVER
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
        return _Node(self._wrap_fold(_char(code)))

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

    def _unicode_escape(self) -> list[str] | None:
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
        atoms = _unicode_class_atoms(name, negate)
        if atoms is None:
            raise RegexSyntaxError(_ERR_INVALID_CHAR_RANGE, self.pattern[start : self.pos])
        return atoms

    def _perl_class(self) -> str | None:
        if self._peek() != "\\" or self._peek(1) not in _PERL_CLASS_LETTERS:
            return None
        letter = self._peek(1)
        self.pos += 2
        return f"\\{letter}"

    # -- character classes -------------------------------------------------------------------------

    def _parse_class(self) -> _Node:
        start = self.pos
        self.pos += 1  # '['
        negated = False
        if self._peek() == "^":
            negated = True
            self.pos += 1
        atoms: list[str] = []
        first = True
        while self.pos < len(self.pattern) and (self._peek() != "]" or first):
            # A leading ']' is a literal; with Perl flags a '-' may appear anywhere.
            first = False
            if self._peek() == "[" and self._peek(1) == ":":
                end = self.pattern.find(":]", self.pos + 2)
                if end >= 0:
                    name = self.pattern[self.pos + 2 : end]
                    if name.removeprefix("^") not in _POSIX_CLASSES:
                        raise RegexSyntaxError(_ERR_INVALID_CHAR_RANGE, self.pattern[self.pos : end + 2])
                    atoms.append(f"[:{name}:]")
                    self.pos = end + 2
                    continue
            unicode_atoms = self._unicode_escape()
            if unicode_atoms is not None:
                atoms += unicode_atoms
                continue
            perl = self._perl_class()
            if perl is not None:
                atoms.append(perl)
                continue
            range_start = self.pos
            lo = self._class_char()
            hi = lo
            if self._peek() == "-" and self._peek(1) not in ("", "]"):
                self.pos += 1
                hi = self._class_char()
                if hi < lo:
                    raise RegexSyntaxError(_ERR_INVALID_CHAR_RANGE, self.pattern[range_start : self.pos])
            atoms += _ranges_atoms([(lo, hi)])
        if self.pos >= len(self.pattern):
            raise RegexSyntaxError(_ERR_MISSING_BRACKET, self.pattern[start:])
        self.pos += 1  # ']'
        return _Node(self._wrap_fold(_class_pattern(atoms, negated)))

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
                current.append(_Node("(?m:$)" if self.flags.multi_line else r"\z"))
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
        # RE2's \b and \B are ASCII word boundaries, as Go's.
        assertions = {"A": r"\A", "z": r"\z", "b": r"\b", "B": r"\B"}
        if nxt in assertions:
            self.pos += 2
            return [_Node(assertions[nxt])]
        if nxt == "Q":
            self.pos += 2
            end = self.pattern.find("\\E", self.pos)
            literal = self.pattern[self.pos :] if end < 0 else self.pattern[self.pos : end]
            self.pos = len(self.pattern) if end < 0 else end + 2
            return [self._literal(ord(ch)) for ch in literal]
        unicode_atoms = self._unicode_escape()
        if unicode_atoms is not None:
            return [_Node(self._wrap_fold(_class_pattern(unicode_atoms, False)))]
        perl = self._perl_class()
        if perl is not None:
            return [_Node(self._wrap_fold(_class_pattern([perl], False)))]
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


def to_re2(pattern: str) -> str:
    """The RE2 pattern equivalent to Go pattern ``pattern``; raises ``RegexSyntaxError`` with Go's text."""
    return _Parser(pattern).parse()


@lru_cache(maxsize=_COMPILED_CACHE_SIZE)
def _compile(pattern: str) -> re2._Regexp | RegexSyntaxError:
    try:
        return re2.compile(to_re2(pattern), _OPTIONS)
    except RegexSyntaxError as error:
        return error
    except re2.error as error:
        # A pattern Go accepts but RE2 cannot build (beyond even the raised memory budget): refuse it
        # with RE2's reason rather than run something else.
        reason = error.args[0].decode() if error.args and isinstance(error.args[0], bytes) else str(error)
        return RegexSyntaxError(reason, pattern)


def compile_error(pattern: str) -> str | None:
    """Go's ``regexp.Compile`` error text for ``pattern`` (what Kubernetes reports when a literal
    pattern fails at program creation), or None if the pattern is valid."""
    compiled = _compile(pattern)
    return str(compiled) if isinstance(compiled, RegexSyntaxError) else None


def _compiled(pattern: str) -> re2._Regexp:
    compiled = _compile(pattern)
    if isinstance(compiled, RegexSyntaxError):
        raise CelFunctionError(f"Illegal regex: {compiled}")
    return compiled


def _utf8(text: str) -> bytes:
    # Lone surrogates (possible in decoded JSON) pass through and come back unchanged.
    return text.encode("utf-8", "surrogatepass")


def _matches(compiled: re2._Regexp, data: bytes) -> Iterator[tuple[int, int]]:
    """Go's ``Regexp.allMatches`` over UTF-8 ``data``: byte spans of successive matches, where an empty
    match right after the previous match is skipped and an empty match steps one code point on."""
    pos = 0
    previous_end = -1
    end = len(data)
    while pos <= end:
        match = compiled.search(data, pos)
        if match is None:
            return
        start, stop = match.span()
        accept = True
        if stop == pos:
            if start == previous_end:
                accept = False
            pos += _code_point_width(data, pos) if pos < end else 1
        else:
            pos = stop
        previous_end = stop
        if accept:
            yield start, stop


def _code_point_width(data: bytes, pos: int) -> int:
    lead = data[pos]
    return 1 if lead < 0xC0 else 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4


def _decode(data: bytes) -> str:
    return data.decode("utf-8", "surrogatepass")


def find(text: str, pattern: str) -> str:
    data = _utf8(text)
    match = _compiled(pattern).search(data)
    return _decode(match.group(0)) if match else ""


def find_all(text: str, pattern: str, limit: int = -1) -> list[str]:
    compiled = _compiled(pattern)
    if limit == 0:
        return []
    data = _utf8(text)
    results: list[str] = []
    for start, stop in _matches(compiled, data):
        results.append(_decode(data[start:stop]))
        if len(results) == limit:
            break
    return results


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
