"""A JSON schema string `pattern` as a regex over the string's JSON encoding, in the grammar engine's dialect.

outlines-core copies a `pattern` between the string's quotes verbatim. That breaks "always valid JSON" twice:
a top-level alternation (`x|y`) binds to the quotes (`"x` or `y"`), and `.`, a negated class or a literal `"`
lets the model write an unescaped quote, backslash or control character inside the string. So the pattern is
rewritten here before outlines-core sees it:

- the result is one group (the alternation stays inside the quotes);
- every character the pattern admits is written as JSON writes it: `"` as `\\"`, `\\` as `\\\\`, control
  characters as their escapes (a class that admits them admits their escapes); `.` admits no quote, backslash
  or control character (so it never ends the string);
- the dialect is the intersection of ECMA-262 (JSON Schema's) and what XGrammar's regex converter accepts:
  lookarounds, backreferences, word boundaries, Unicode property classes, possessive quantifiers and inline
  flags are refused by name; `(?:...)` and named groups become plain groups, lazy quantifiers greedy ones
  (the same language), `{n}` is written `{n,n}`; `^` and `$` only at the ends (they are implied there).

Pure and linear in the pattern's length. `PatternError` carries a message for a 400.
"""

from __future__ import annotations

MAX_CODEPOINT = 0x10FFFF
# what may appear unescaped in a JSON string: everything but '"', '\\' and U+0000-U+001F
_UNSAFE = ((0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C))
_JSON_ESCAPES = {
    0x22: '\\\\"',
    0x5C: "\\\\\\\\",
    0x08: "\\\\b",
    0x0C: "\\\\f",
    0x0A: "\\\\n",
    0x0D: "\\\\r",
    0x09: "\\\\t",
}
_REGEX_SPECIAL = set(".^$|?*+()[]{}\\")
# written as \uHHHH inside a class: XGrammar reads \^ in a class wrongly, and \xHH greedily (\x2da is U+02DA)
_CLASS_SPECIAL = set("[]^-\\")
_SURROGATES = ((0xD800, 0xDFFF),)  # not characters: never in a UTF-8 regex
_DIGIT = ((0x30, 0x39),)
_WORD = ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A))
_SPACE = ((0x09, 0x0D), (0x20, 0x20), (0xA0, 0xA0), (0x2028, 0x2029), (0xFEFF, 0xFEFF))
_CHAR_ESCAPES = {"n": 0x0A, "t": 0x09, "r": 0x0D, "f": 0x0C, "v": 0x0B, "0": 0x00}
_REFUSED_ESCAPES = {
    "b": "a word boundary (\\b)",
    "B": "a word boundary (\\B)",
    "p": "a Unicode property class (\\p)",
    "P": "a Unicode property class (\\P)",
    "k": "a backreference (\\k)",
}


class PatternError(ValueError):
    """The pattern uses what the grammar engine cannot run, or is malformed."""


Ranges = tuple[tuple[int, int], ...]


def rewrite(pattern: str, max_repeat: int) -> str:
    """The regex (one group) of the JSON-encoded bodies of the strings `pattern` matches."""
    return "(" + _Rewriter(pattern, max_repeat).run() + ")"


def _normalize(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _complement(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out, nxt = [], 0
    for lo, hi in _normalize(ranges):
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= MAX_CODEPOINT:
        out.append((nxt, MAX_CODEPOINT))
    return out


def _intersect(a: list[tuple[int, int]], b: Ranges | list[tuple[int, int]]) -> list[tuple[int, int]]:
    out = []
    for lo, hi in a:
        for blo, bhi in b:
            x, y = max(lo, blo), min(hi, bhi)
            if x <= y:
                out.append((x, y))
    return _normalize(out)


def _class_char(cp: int) -> str:
    """One code point inside a character class: printable ASCII escaped when special, the rest literal."""
    ch = chr(cp)
    return f"\\u{cp:04x}" if ch in _CLASS_SPECIAL else ch


def _json_char(cp: int) -> str:
    """One code point outside a class, as JSON writes it, as a regex (a group when it is several atoms)."""
    if cp in _JSON_ESCAPES:
        return "(" + _JSON_ESCAPES[cp] + ")"
    if cp < 0x20:
        return f"(\\\\u00{cp:02x})"
    ch = chr(cp)
    return "\\" + ch if ch in _REGEX_SPECIAL else ch


def _json_class(ranges: list[tuple[int, int]]) -> str:
    """A set of code points as the regex of their JSON encodings: a class of the safe ones, escapes for the rest."""
    ranges = _normalize(ranges)
    if not ranges:
        raise PatternError("a character class that matches nothing")
    safe = _intersect(ranges, _complement(list(_UNSAFE + _SURROGATES)))
    unsafe = _intersect(ranges, _UNSAFE)
    alts = []
    if safe:
        alts.append(
            "["
            + "".join(_class_char(lo) if lo == hi else f"{_class_char(lo)}-{_class_char(hi)}" for lo, hi in safe)
            + "]"
        )
    for lo, hi in unsafe:  # each an escape: _json_char groups it, the alternation needs no group
        alts += [_json_char(cp)[1:-1] for cp in range(lo, hi + 1)]
    return alts[0] if len(alts) == 1 else "(" + "|".join(alts) + ")"


class _Rewriter:
    def __init__(self, pattern: str, max_repeat: int) -> None:
        self.p = pattern
        self.i = 0
        self.max_repeat = max_repeat
        self.out: list[str] = []
        self.depth = 0
        self.atom = False  # the last thing written can take a quantifier

    def run(self) -> str:
        p = self.p
        if p.startswith("^"):
            self.i = 1
        end = len(p)
        if end > self.i and p.endswith("$") and not _escaped(p, end - 1):
            end -= 1
        while self.i < end:
            self._token(end)
        if self.depth:
            raise PatternError("an unclosed '('")
        return "".join(self.out)

    def _emit(self, text: str, atom: bool) -> None:
        self.out.append(text)
        self.atom = atom

    def _token(self, end: int) -> None:
        c = self.p[self.i]
        if c == "\\":
            self._escape()
        elif c == "[":
            self._emit(_json_class(self._class()), True)
        elif c == ".":
            self.i += 1
            # ECMA's '.' excludes line terminators; JSON needs no quote, backslash or control character either
            self._emit(_json_class(_complement([*_UNSAFE, (0x2028, 0x2029)])), True)
        elif c == "(":
            self._group()
        elif c == ")":
            if not self.depth:
                raise PatternError("an unmatched ')'")
            self.depth -= 1
            self.i += 1
            self._emit(")", True)
        elif c == "|":
            self.i += 1
            self._emit("|", False)
        elif c in "*+?":
            self._quantifier(c)
        elif c == "{" and self._repeat(end):
            pass
        elif c in "^$":
            raise PatternError(f"'{c}' is only supported at the start or end of the pattern")
        else:
            self.i += 1
            self._emit(_json_char(ord(c)), True)

    def _quantifier(self, c: str) -> None:
        if not self.atom:
            raise PatternError(f"'{c}' follows nothing it can repeat")
        self.i += 1
        self._emit(c, False)
        self._lazy_or_possessive()

    def _lazy_or_possessive(self) -> None:
        if self.i < len(self.p) and self.p[self.i] == "?":
            self.i += 1  # lazy: the same language
        elif self.i < len(self.p) and self.p[self.i] == "+":
            raise PatternError("a possessive quantifier is not supported")

    def _repeat(self, end: int) -> bool:
        """`{n}`, `{n,}` or `{n,m}`; False when the brace is a literal (ECMA Annex B)."""
        close = self.p.find("}", self.i, end)
        body = self.p[self.i + 1 : close] if close > 0 else ""
        lo_s, comma, hi_s = body.partition(",")
        if close < 0 or not lo_s.isdigit() or (hi_s and not hi_s.isdigit()) or not lo_s.isascii():
            self.i += 1
            self._emit("\\{", True)
            return True
        if not self.atom:
            raise PatternError("'{' follows nothing it can repeat")
        lo = int(lo_s)
        hi = int(hi_s) if hi_s else (lo if not comma else None)
        for n in (lo, hi):
            if n is not None and n > self.max_repeat:
                raise PatternError(f"a repetition count of {n} (at most {self.max_repeat})")
        if hi is not None and hi < lo:
            raise PatternError(f"a repetition range {{{body}}} whose maximum is below its minimum")
        self.i = close + 1
        self._emit(f"{{{lo},{'' if hi is None else hi}}}", False)
        self._lazy_or_possessive()
        return True

    def _group(self) -> None:
        p = self.p
        self.i += 1
        if p.startswith("?", self.i):
            if p.startswith("?:", self.i):
                self.i += 2
            elif p.startswith(("?=", "?!"), self.i):
                raise PatternError("a lookahead assertion ((?= or (?!) is not supported")
            elif p.startswith(("?<=", "?<!"), self.i):
                raise PatternError("a lookbehind assertion ((?<= or (?<!) is not supported")
            elif p.startswith(("?<", "?P<"), self.i):
                close = p.find(">", self.i)
                if close < 0:
                    raise PatternError("an unclosed group name")
                self.i = close + 1
            else:
                raise PatternError("inline flags and other (? groups are not supported")
        self.depth += 1
        self._emit("(", False)

    def _escape(self) -> None:
        p = self.p
        if self.i + 1 >= len(p):
            raise PatternError("a trailing backslash")
        e = p[self.i + 1]
        if e in _REFUSED_ESCAPES:
            raise PatternError(f"{_REFUSED_ESCAPES[e]} is not supported")
        if e.isdigit() and e != "0":
            raise PatternError("a backreference (\\1-\\9) is not supported")
        sets = {"d": _DIGIT, "w": _WORD, "s": _SPACE}
        if e.lower() in sets and e.isascii():
            self.i += 2
            ranges = list(sets[e.lower()])
            self._emit(_json_class(_complement(ranges) if e.isupper() else ranges), True)
            return
        self._emit(_json_char(self._escaped_char()), True)

    def _escaped_char(self) -> int:
        """The code point of the escape at i (\\n, \\xHH, \\uHHHH, \\u{H..}, \\cX, or the character itself)."""
        p, e = self.p, self.p[self.i + 1]
        if e in _CHAR_ESCAPES:
            self.i += 2
            return _CHAR_ESCAPES[e]
        if e == "x":
            return self._hex(2, 2)
        if e == "u":
            if p.startswith("{", self.i + 2):
                close = p.find("}", self.i + 3)
                if close < 0:
                    raise PatternError("an unclosed \\u{ escape")
                return self._code(p[self.i + 3 : close], close + 1)
            return self._hex(2, 4)
        if e == "c":
            if self.i + 2 >= len(p) or not p[self.i + 2].isascii() or not p[self.i + 2].isalpha():
                raise PatternError("an invalid \\c escape")
            self.i += 3
            return ord(p[self.i - 1]) % 32
        self.i += 2
        return ord(e)

    def _hex(self, skip: int, digits: int) -> int:
        return self._code(self.p[self.i + skip : self.i + skip + digits], self.i + skip + digits, digits)

    def _code(self, text: str, after: int, digits: int | None = None) -> int:
        try:
            cp = int(text, 16) if text and text.isascii() and (digits is None or len(text) == digits) else -1
        except ValueError:
            cp = -1
        if not 0 <= cp <= MAX_CODEPOINT or len(text) > 6:
            raise PatternError(f"an invalid escape \\{self.p[self.i + 1]}{text}")
        self.i = after
        return cp

    def _class(self) -> list[tuple[int, int]]:
        """The code points of the class at i (`[...]`, negation applied)."""
        p = self.p
        self.i += 1
        negated = p.startswith("^", self.i)
        if negated:
            self.i += 1
        ranges: list[tuple[int, int]] = []
        first = True
        while True:
            if self.i >= len(p):
                raise PatternError("an unclosed '['")
            c = p[self.i]
            if c == "]" and not first:
                self.i += 1
                break
            first = False
            lo = self._class_atom(ranges)
            if lo is None:
                continue
            if p.startswith("-", self.i) and self.i + 1 < len(p) and p[self.i + 1] != "]":
                self.i += 1
                hi = self._class_atom(ranges)
                if hi is None:
                    raise PatternError("a class range with a class (\\d, \\w, \\s) as its end")
                if hi < lo:
                    raise PatternError("a class range out of order")
                ranges.append((lo, hi))
            else:
                ranges.append((lo, lo))
        ranges = _normalize(ranges)
        return _complement(ranges) if negated else ranges

    def _class_atom(self, ranges: list[tuple[int, int]]) -> int | None:
        """One class member: a code point, or None when it was a set (\\d, \\w, \\s) added to `ranges`."""
        p = self.p
        c = p[self.i]
        if c != "\\":
            self.i += 1
            return ord(c)
        if self.i + 1 >= len(p):
            raise PatternError("a trailing backslash")
        e = p[self.i + 1]
        sets = {"d": _DIGIT, "w": _WORD, "s": _SPACE}
        if e.lower() in sets and e.isascii():
            self.i += 2
            ranges.extend(_complement(list(sets[e.lower()])) if e.isupper() else sets[e.lower()])
            return None
        if e == "b":  # inside a class, \b is backspace
            self.i += 2
            return 0x08
        if e in _REFUSED_ESCAPES:
            raise PatternError(f"{_REFUSED_ESCAPES[e]} is not supported")
        return self._escaped_char()


def _escaped(s: str, i: int) -> bool:
    """Is s[i] escaped (an odd run of backslashes before it)?"""
    n = 0
    while i - 1 - n >= 0 and s[i - 1 - n] == "\\":
        n += 1
    return n % 2 == 1
