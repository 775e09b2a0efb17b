"""llama.cpp's `-ot` patterns matched in bounded time: the ECMAScript subset, linear-time.

llama.cpp matches `-ot` patterns with std::regex (ECMAScript grammar) and regex_search
over tensor names. A backtracking engine (std::regex, Python's re) can take minutes on
a pattern such as `(.+)+X`; this one compiles the pattern into a Thompson NFA and
simulates it over the name (a lazily built DFA, cached per pattern), so a search costs at
most (name length) x (NFA states), and the NFA is capped at MAX_STATES.

Supported: literals, `.`, classes `[...]` (ranges, negation, escapes, `[:digit:]` and the
other POSIX names), `\\d \\w \\s` and
their negations, `\\t \\n \\r \\f \\v \\0 \\xHH \\uHHHH \\cX`, identity escapes, groups
`(...)` `(?:...)`, `|`, `* + ?` and `{n} {n,} {n,m}` (greedy or lazy: the same for a
yes/no search), and the assertions `^ $ \\b \\B`. Backreferences and lookaheads need
backtracking: they are refused (RegexError) rather than matched without a bound.
Counted repetitions are capped at MAX_COUNT: names are at most MAX_NAME characters
(llama.cpp's GGML_MAX_NAME is 64), so a larger count can only change whether a name longer
than that matches.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

MAX_PATTERN = 4096  # characters
MAX_DEPTH = 64  # nested groups
MAX_STATES = 4_000  # NFA states after counted repetitions are expanded
MAX_NAME = 256  # characters of a name searched (longer names: RegexError)
MAX_CACHED = 4096  # DFA states (sets of NFA states) kept per pattern
MAX_COUNT = MAX_NAME + 1  # a {n,m} count above this cannot decide a name of MAX_NAME characters

_LINE_TERMINATORS = "\n\r\u2028\u2029"
_WORD = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_SPACE = frozenset(" \t\n\r\f\v\u00a0\u1680\u2028\u2029\u202f\u205f\u3000\ufeff"
                   + "".join(chr(c) for c in range(0x2000, 0x200b)))
_DIGIT = frozenset("0123456789")
_CLASS_SETS = {"d": (_DIGIT, False), "D": (_DIGIT, True), "w": (_WORD, False), "W": (_WORD, True),
               "s": (_SPACE, False), "S": (_SPACE, True)}
_CONTROL_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f", "v": "\v", "0": "\0"}
_LOWER, _UPPER = frozenset("abcdefghijklmnopqrstuvwxyz"), frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_PUNCT = frozenset(chr(c) for c in range(0x21, 0x7F)) - _LOWER - _UPPER - _DIGIT
_CLASS_NAMES = {  # std::regex's [[:name:]] in the "C" locale (ctype's ASCII classes)
    "alnum": _LOWER | _UPPER | _DIGIT, "alpha": _LOWER | _UPPER, "blank": frozenset(" \t"),
    "cntrl": frozenset(chr(c) for c in [*range(0x20), 0x7F]), "digit": _DIGIT, "d": _DIGIT,
    "graph": _LOWER | _UPPER | _DIGIT | _PUNCT, "print": _LOWER | _UPPER | _DIGIT | _PUNCT | {" "},
    "lower": _LOWER, "punct": _PUNCT, "space": frozenset(" \t\n\r\f\v"), "s": frozenset(" \t\n\r\f\v"),
    "upper": _UPPER, "xdigit": _DIGIT | frozenset("abcdefABCDEF"), "w": _WORD,
}


class RegexError(ValueError):
    """A pattern this matcher will not take: a syntax error, or a construct or size it refuses."""


@dataclass(frozen=True)
class CharSet:
    """Characters as (lo, hi) code point ranges plus named sets, optionally negated."""

    ranges: tuple[tuple[int, int], ...]
    sets: tuple[tuple[frozenset, bool], ...] = ()  # (set, negated): \d \W ... inside a class
    negated: bool = False

    def __contains__(self, ch: str) -> bool:
        c = ord(ch)
        hit = any(lo <= c <= hi for lo, hi in self.ranges) or any((ch in s) != neg for s, neg in self.sets)
        return hit != self.negated


_ANY = CharSet((), ((frozenset(_LINE_TERMINATORS), True),))  # `.`


# --- parsing: pattern -> tree ------------------------------------------------------------
# Nodes: ("set", CharSet) | ("cat", [nodes]) | ("alt", [nodes]) | ("rep", node, lo, hi|None)
#        | ("assert", "^" | "$" | "b" | "B")


class _Parser:
    def __init__(self, pattern: str) -> None:
        self.p = pattern
        self.i = 0
        self.depth = 0

    def fail(self, what: str) -> RegexError:
        return RegexError(f"{what} at character {self.i + 1}")

    def peek(self) -> str | None:
        return self.p[self.i] if self.i < len(self.p) else None

    def parse(self):  # type: ignore[no-untyped-def]
        node = self.alternation()
        if self.i < len(self.p):
            raise self.fail("unmatched ')'")
        return node

    def alternation(self):  # type: ignore[no-untyped-def]
        branches = [self.sequence()]
        while self.peek() == "|":
            self.i += 1
            branches.append(self.sequence())
        return branches[0] if len(branches) == 1 else ("alt", branches)

    def sequence(self):  # type: ignore[no-untyped-def]
        items = []
        while self.peek() not in (None, "|", ")"):
            atom = self.atom()
            items.append(self.quantified(atom))
        return ("cat", items)

    def quantified(self, atom):  # type: ignore[no-untyped-def]
        ch = self.peek()
        if ch in ("*", "+", "?"):
            self.i += 1
            lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[ch]
        elif ch == "{" and (count := self.count()) is not None:
            lo, hi = count
        else:
            return atom
        if atom[0] == "assert":
            raise self.fail("nothing to repeat")
        if self.peek() == "?":  # lazy: the same set of names matches
            self.i += 1
        if self.peek() in ("*", "+", "?") or (self.peek() == "{" and self.count(peek_only=True)):
            raise self.fail("nothing to repeat")
        return ("rep", atom, lo, hi)

    def count(self, peek_only: bool = False) -> tuple[int, int | None] | None:
        """`{n}`, `{n,}` or `{n,m}` at self.i (None: not a count; ECMAScript then fails)."""
        j = self.p.find("}", self.i)
        body = self.p[self.i + 1:j] if j > 0 else ""
        lo_text, comma, hi_text = body.partition(",")
        if not (lo_text.isascii() and lo_text.isdigit()) or (hi_text and not (hi_text.isascii() and hi_text.isdigit())):
            if peek_only:
                return None
            raise self.fail("'{' is not a repetition count {n}, {n,} or {n,m}")
        if peek_only:
            return 0, 0
        self.i = j + 1
        lo = _capped(lo_text)
        hi = lo if not comma else (None if not hi_text else _capped(hi_text))
        if hi_text and _as_number(hi_text) < _as_number(lo_text):
            raise self.fail("numbers out of order in a {n,m} count")
        return lo, hi

    def atom(self):  # type: ignore[no-untyped-def]
        ch = self.p[self.i]
        self.i += 1
        if ch == "(":
            return self.group()
        if ch == ".":
            return ("set", _ANY)
        if ch in "^$":
            return ("assert", ch)
        if ch == "[":
            return ("set", self.char_class())
        if ch == "\\":
            return self.escape()
        if ch in "*+?":
            raise self.fail("nothing to repeat")
        if ch == "{" and self.count_here():
            raise self.fail("nothing to repeat")
        if ch == "{":
            raise self.fail("'{' is not a repetition count {n}, {n,} or {n,m}")
        return ("set", _literal(ch))

    def count_here(self) -> bool:
        self.i -= 1
        found = self.count(peek_only=True) is not None
        self.i += 1
        return found

    def group(self):  # type: ignore[no-untyped-def]
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.fail(f"groups nested more than {MAX_DEPTH} deep")
        if self.p.startswith("?:", self.i):
            self.i += 2
        elif self.p.startswith("?=", self.i) or self.p.startswith("?!", self.i):
            raise self.fail("a lookahead (?= or (?! needs a backtracking matcher; COPE's bounded one refuses it")
        elif self.peek() == "?":
            raise self.fail("'(?' is not a group ECMAScript knows")
        node = self.alternation()
        if self.peek() != ")":
            raise self.fail("missing ')'")
        self.i += 1
        self.depth -= 1
        return node

    def escape(self):  # type: ignore[no-untyped-def]
        if self.i >= len(self.p):
            raise self.fail("a trailing backslash")
        ch = self.p[self.i]
        self.i += 1
        if ch in "bB":
            return ("assert", ch)
        if ch in _CLASS_SETS:
            s, neg = _CLASS_SETS[ch]
            return ("set", CharSet((), ((s, neg),)))
        if ch in "123456789":
            raise self.fail(f"a backreference \\{ch} needs a backtracking matcher; COPE's bounded one refuses it")
        return ("set", _literal(self.escaped_char(ch)))

    def escaped_char(self, ch: str) -> str:
        """The character an escape `\\ch...` stands for (self.i is after ch)."""
        if ch in _CONTROL_ESCAPES:
            if ch == "0" and self.peek() is not None and self.peek().isdigit():  # type: ignore[union-attr]
                raise self.fail("an octal escape is not ECMAScript")
            return _CONTROL_ESCAPES[ch]
        if ch in "xu":
            width = 2 if ch == "x" else 4
            digits = self.p[self.i:self.i + width]
            if len(digits) != width or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise self.fail(f"\\{ch} needs {width} hexadecimal digits")
            self.i += width
            return chr(int(digits, 16))
        if ch == "c":
            letter = self.peek()
            if letter is None or not (letter.isascii() and letter.isalpha()):
                raise self.fail("\\c needs a letter")
            self.i += 1
            return chr(ord(letter) % 32)
        if ch.isascii() and ch.isalnum():
            raise self.fail(f"\\{ch} is not an escape ECMAScript knows")
        return ch  # identity escape: \. \\ \( ...

    def char_class(self) -> CharSet:
        negated = self.peek() == "^"
        if negated:
            self.i += 1
        ranges: list[tuple[int, int]] = []
        sets: list[tuple[frozenset, bool]] = []
        while True:
            if self.i >= len(self.p):
                raise self.fail("missing ']'")
            ch = self.p[self.i]
            if ch == "]":  # ECMAScript: [] matches nothing, [^] anything
                self.i += 1
                break
            lo = self.class_atom()
            if isinstance(lo, tuple):
                sets.append(lo)
                continue
            if self.peek() == "-" and self.i + 1 < len(self.p) and self.p[self.i + 1] != "]":
                self.i += 1
                hi = self.class_atom()
                if isinstance(hi, tuple):
                    raise self.fail("a class like \\d cannot end a range")
                if ord(hi) < ord(lo):
                    raise self.fail("a range out of order in [...]")
                ranges.append((ord(lo), ord(hi)))
            else:
                ranges.append((ord(lo), ord(lo)))
        return CharSet(tuple(ranges), tuple(sets), negated)

    def class_atom(self) -> str | tuple[frozenset, bool]:
        ch = self.p[self.i]
        if self.p.startswith("[:", self.i):
            return self.class_name()
        self.i += 1
        if ch != "\\":
            return ch
        if self.i >= len(self.p):
            raise self.fail("a trailing backslash")
        esc = self.p[self.i]
        self.i += 1
        if esc in _CLASS_SETS:
            return _CLASS_SETS[esc]
        if esc == "b":
            return "\b"  # inside a class, \b is a backspace
        if esc == "B" or esc in "123456789":
            raise self.fail(f"\\{esc} is not allowed in [...]")
        return self.escaped_char(esc)


    def class_name(self) -> tuple[frozenset, bool]:
        """`[:digit:]` and the other POSIX names std::regex takes inside a class (the "C"
        locale's ASCII sets; `[:d:]`, `[:w:]`, `[:s:]` as \\d \\w \\s)."""
        end = self.p.find(":]", self.i + 2)
        name = self.p[self.i + 2 : end] if end >= 0 else ""
        if name not in _CLASS_NAMES:
            raise self.fail(f"[:{name}:] is not a character class name std::regex knows" if end >= 0
                            else "missing ':]'")
        self.i = end + 2
        return _CLASS_NAMES[name], False


def _as_number(digits: str) -> tuple[int, str]:
    """A decimal count of any length, comparable without converting it (no huge ints)."""
    digits = digits.lstrip("0") or "0"
    return len(digits), digits


def _capped(digits: str) -> int:
    """A count capped at MAX_COUNT: a larger one cannot change a short name's match."""
    return MAX_COUNT if _as_number(digits) > _as_number(str(MAX_COUNT)) else int(digits)


def _literal(ch: str) -> CharSet:
    return CharSet(((ord(ch), ord(ch)),))


# --- compiling: tree -> NFA ---------------------------------------------------------------
# A state is ("set", CharSet, next) | ("split", a, b) | ("assert", kind, next) | ("match",).
# Fragments are (start, [dangling (state, slot)]) patched when the next piece is known.


class _Builder:
    def __init__(self) -> None:
        self.states: list[list] = []

    def add(self, *state) -> int:  # type: ignore[no-untyped-def]
        if len(self.states) >= MAX_STATES:
            raise RegexError(f"too complex: more than {MAX_STATES} states once its repetitions are expanded")
        self.states.append(list(state))
        return len(self.states) - 1

    def patch(self, outs: list[tuple[int, int]], target: int) -> None:
        for s, slot in outs:
            self.states[s][slot] = target

    def build(self, node) -> tuple[int, list[tuple[int, int]]]:  # type: ignore[no-untyped-def]
        kind = node[0]
        if kind == "set":
            s = self.add("set", node[1], None)
            return s, [(s, 2)]
        if kind == "assert":
            s = self.add("assert", node[1], None)
            return s, [(s, 2)]
        if kind == "cat":
            if not node[1]:
                s = self.add("split", None, None)  # an empty piece: one epsilon state
                return s, [(s, 1), (s, 2)]
            start, outs = self.build(node[1][0])
            for item in node[1][1:]:
                nxt, nouts = self.build(item)
                self.patch(outs, nxt)
                outs = nouts
            return start, outs
        if kind == "alt":
            first, outs = self.build(node[1][0])
            for branch in node[1][1:]:
                other, oouts = self.build(branch)
                first = self.add("split", first, other)
                outs = outs + oouts
            return first, outs
        return self.repeat(node[1], node[2], node[3])

    def repeat(self, node, lo: int, hi: int | None):  # type: ignore[no-untyped-def]
        pieces: list[tuple[int, list[tuple[int, int]]]] = []
        for _ in range(lo):
            pieces.append(self.build(node))
        if hi is None:  # a loop: split -> node -> back to the split
            body, bouts = self.build(node)
            loop = self.add("split", body, None)
            self.patch(bouts, loop)
            pieces.append((loop, [(loop, 2)]))
        else:
            for _ in range(hi - lo):  # optional copies: split -> node | skip
                body, bouts = self.build(node)
                opt = self.add("split", body, None)
                pieces.append((opt, bouts + [(opt, 2)]))
        if not pieces:
            s = self.add("split", None, None)
            return s, [(s, 1), (s, 2)]
        start, outs = pieces[0]
        for nxt, nouts in pieces[1:]:
            self.patch(outs, nxt)
            outs = nouts
        return start, outs


class Pattern:
    """A compiled pattern: `search(name)` is std::regex_search's yes/no, in bounded time."""

    def __init__(self, pattern: str) -> None:
        if len(pattern) > MAX_PATTERN:
            raise RegexError(f"longer than {MAX_PATTERN} characters")
        tree = _Parser(pattern).parse()
        builder = _Builder()
        start, outs = builder.build(tree)
        match = builder.add("match")
        builder.patch(outs, match)
        self.pattern = pattern
        self._states = [tuple(s) for s in builder.states]
        self._start = start
        self._closures: dict = {}
        self._steps: dict = {}

    @property
    def size(self) -> int:
        """NFA states: what one step of a search may visit."""
        return len(self._states)

    def search(self, name: str) -> bool:
        if len(name) > MAX_NAME:
            raise RegexError(f"a name longer than {MAX_NAME} characters")
        current: frozenset = frozenset()
        for pos in range(len(name) + 1):
            context = _context(name, pos)
            current = self._closure(current | {self._start}, context)
            if self._match in current:
                return True
            if pos == len(name):
                return False
            current = self._step(current, name[pos])
        return False

    @property
    def _match(self) -> int:
        return len(self._states) - 1

    def _closure(self, seeds: frozenset, context: tuple[bool, bool, bool, bool]) -> frozenset:
        key = (seeds, context)
        found = self._closures.get(key)
        if found is not None:
            return found
        at_start, at_end, word_before, word_after = context
        seen: set[int] = set()
        stack = list(seeds)
        while stack:
            s = stack.pop()
            if s is None or s in seen:
                continue
            seen.add(s)
            state = self._states[s]
            if state[0] == "split":
                stack.extend((state[1], state[2]))
            elif state[0] == "assert":
                kind = state[1]
                holds = {"^": at_start, "$": at_end, "b": word_before != word_after,
                         "B": word_before == word_after}[kind]
                if holds:
                    stack.append(state[2])
        result = frozenset(s for s in seen if self._states[s][0] in ("set", "match"))
        if len(self._closures) >= MAX_CACHED:
            self._closures.clear()
        self._closures[key] = result
        return result

    def _step(self, current: frozenset, ch: str) -> frozenset:
        key = (current, ch)
        found = self._steps.get(key)
        if found is None:
            found = frozenset(st[2] for s in current if (st := self._states[s])[0] == "set" and ch in st[1])
            if len(self._steps) >= MAX_CACHED:  # a cache, not a record: memory stays bounded
                self._steps.clear()
            self._steps[key] = found
        return found


def _context(name: str, pos: int) -> tuple[bool, bool, bool, bool]:
    before = name[pos - 1] in _WORD if pos > 0 else False
    after = name[pos] in _WORD if pos < len(name) else False
    return pos == 0, pos == len(name), before, after


@lru_cache(maxsize=1024)  # --n-cpu-moe 512 takes 512; -ot patterns the rest
def compile_pattern(pattern: str) -> Pattern:
    """The pattern compiled (cached); raises RegexError with the reason."""
    try:
        return Pattern(pattern)
    except RecursionError:  # belt and braces: MAX_DEPTH keeps the parser shallow
        raise RegexError("nested too deeply") from None


@lru_cache(maxsize=1 << 16)  # a placement asks about the same tensor names again and again (a fit, --fit)
def search(pattern: str, name: str) -> bool:
    return compile_pattern(pattern).search(name)
