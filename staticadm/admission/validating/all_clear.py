"""One engine call for a request that every policy it invokes lets through.

Most requests pass every policy they invoke: no denial, warning, audit annotation error or evaluation error.
For the policies a request invokes (after matching), one program (``cel/fusion.py``) evaluates every match
condition, validation and audit annotation and answers whether that is so; only when it is not are the
bindings evaluated one expression at a time (``dispatcher.py``), which decides exactly. Programs are built
per set of policies on first use and kept with the set's first policy (``CompiledValidatingPolicy.sets``), so
a reload that keeps those policies keeps them too. What a program answered for an input is kept for the requests
that give it the same input (``AnswersByInput``).

"All clear" must stand for what the exact evaluation would reach, costs included: each scope (a binding's
match conditions, its validations and then its messageExpressions, its audit annotations) costs at most what
the whole program charged, so the program's total, with room for the largest messageExpression bound, must
fit the smallest budget; no expression or variable may pass its own limit (their charges only add up in the
program, so none did); and nothing may need stepping, the deadline or an engine failure. When one of these
does not hold the program says nothing and the exact evaluation runs.

Stage: evaluate, the fast path. Receives the invoked policies and the request's activation; hands on each policy's
all-clear answer, or None.
"""

from __future__ import annotations

import functools
import itertools
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import orjson

from staticadm import gofmt
from staticadm.admission.generic import deferred
from staticadm.bounded import keep_bounded
from staticadm.cel import CompiledExpression, admission_environment
from staticadm.cel.cost import RUNTIME_CEL_COST_BUDGET, RUNTIME_CEL_COST_BUDGET_MATCH_CONDITIONS
from staticadm.cel.evaluation import EvaluationContext
from staticadm.cel.fusion import APPLIES, FusedLayout, FusedPolicy
from staticadm.compiled import CompiledValidatingPolicy, PolicySets

if TYPE_CHECKING:
    from staticadm.snapshot import Snapshot

#: Serial numbers of set programs (``SetProgram.serial``).
_SERIALS = itertools.count()
#: Sets kept per leading policy; a full memo is dropped (it refills from the same policies).
MAX_SETS_PER_POLICY = 16
#: After this many requests in a row that a set's program did not find all clear (a policy that warns or
#: audits every request), it is only tried on one request in ``RETRY_EVERY``: each try costs an evaluation.
MISS_STREAK = 8
RETRY_EVERY = 32
#: After this many requests in a row whose input had no kept answer (inputs that never recur), a set's requests are
#: looked up (and kept) only one in ``INPUT_RETRY_EVERY``: the key costs each request a few microseconds.
INPUT_MISS_STREAK = 64
INPUT_RETRY_EVERY = 16


@dataclass(frozen=True, slots=True)
class PolicyClear:
    """What the program found for one policy of an all-clear request: the name of the match condition that was
    false (the policy does not apply), or None; the audit annotations it publishes, (key, trimmed value)."""

    skipped_by: str | None
    published: tuple[tuple[str, str], ...] = ()


_APPLIES_SILENTLY = PolicyClear(None)


@functools.lru_cache(maxsize=4096)
def _skipped_by(condition: str) -> PolicyClear:
    """A policy skipped by the match condition named ``condition``: one object per name (names come from the
    policies, not from requests), so a request's answer makes none."""
    return PolicyClear(condition)


@dataclass(slots=True, eq=False)
class SetProgram:
    """The program of one set of policies and how to read its answer."""

    #: The members' ``PolicySets``: their identities are the key, so they are kept alive with the entry.
    members: tuple[PolicySets, ...]
    #: None when the engine refused the program: the set is always evaluated exactly.
    program: Any
    layout: FusedLayout
    static_cost: int
    #: The most the program may charge for "all clear" to hold in every scope of every member.
    cost_limit: int
    #: Per member: the position of its match-condition outcome in the answer (-1: it has none), where its
    #: annotations' values start, and their keys.
    readings: tuple[tuple[int, int, tuple[str, ...]], ...]
    #: Requests it found all clear; requests in a row it did not, and requests it was not tried on since.
    answered: int = 0
    misses: int = 0
    passed_over: int = 0
    #: Requests in a row whose input had no kept answer (``AnswersByInput``), and requests not looked up since.
    inputs_missed: int = 0
    inputs_passed_over: int = 0
    #: The last listed answer it read (its JSON), what that said, and the audit annotations it published (made by
    #: the dispatcher on first use): consecutive requests mostly get the same answer, read once. Replaced whole, so
    #: a thread reading it sees one consistent triple.
    last_reading: tuple[bytes, list[PolicyClear], dict[str, str] | None] | None = None
    #: Names this program among every one the process builds (``AnswersByInput`` keys by it, not by the program, so
    #: that what it keeps holds nothing the garbage collector has to visit).
    serial: int = field(default_factory=lambda: next(_SERIALS))


def set_program(policies: Sequence[CompiledValidatingPolicy]) -> SetProgram | None:
    """The program of ``policies`` (in evaluation order, each once), built on first use; None while it is being
    built off the request path (``generic/deferred.py``)."""
    memo = policies[0].sets.built
    key = tuple(id(compiled.sets) for compiled in policies)
    entry = memo.get(key)
    if entry is None:
        if deferred.build_later(key, functools.partial(_build_into, memo, key, policies)):
            return None
        entry = _build_into(memo, key, policies)
    return entry


def _build_into(memo: dict[tuple[int, ...], Any], key: tuple[int, ...],
                policies: Sequence[CompiledValidatingPolicy]) -> SetProgram:
    entry = _build(policies)
    keep_bounded(memo, key, entry, MAX_SETS_PER_POLICY)
    return entry


def _build(policies: Sequence[CompiledValidatingPolicy]) -> SetProgram:
    parts = []
    static_cost = 0
    largest_messages = 0
    readings = []
    conditional = 0
    annotations = 0
    for compiled in policies:
        # Every one compiled (``joins_sets``); a variable that did not is an error when read, as it is linked.
        conditions = [cast(CompiledExpression, program) for _, program in compiled.match_conditions]
        validations = [cast(CompiledExpression, validation.expression) for validation in compiled.validations]
        values = [cast(CompiledExpression, program) for _, program in compiled.audit_annotations]
        variables = [(name, program.prepared if isinstance(program, CompiledExpression) else program.message)
                     for name, program in compiled.variables.items()]
        static_cost += sum(program.static_cost for program in (*conditions, *validations, *values,
                                                               *compiled.compiled_variables.values()))
        largest_messages = max(largest_messages, compiled.message_cost_bound or 0)
        parts.append(FusedPolicy(variables, [program.prepared for program in conditions],
                                 [program.prepared for program in validations],
                                 [program.prepared for program in values]))
        keys = tuple(annotation.key for annotation, _ in compiled.audit_annotations)
        readings.append((conditional if compiled.match_conditions else -1, annotations, keys))
        conditional += bool(compiled.match_conditions)
        annotations += len(keys)
    readings = [(slot, conditional + start, keys) for slot, start, keys in readings]
    built = admission_environment(False).fuse(parts)
    program, layout = built if built is not None else (None, FusedLayout(False, 0))
    limit = min(RUNTIME_CEL_COST_BUDGET_MATCH_CONDITIONS, RUNTIME_CEL_COST_BUDGET - largest_messages)
    return SetProgram(members=tuple(compiled.sets for compiled in policies), program=program, layout=layout,
                      static_cost=static_cost, cost_limit=limit, readings=tuple(readings))


def all_clear(entry: SetProgram, policies: Sequence[CompiledValidatingPolicy],
              context: EvaluationContext) -> list[PolicyClear] | None:
    """What each of ``policies`` (``entry``'s set) does for the request whose activation ``context`` holds, when
    the request is all clear for every one of them; None when it may not be (the exact evaluation says)."""
    if entry.program is None:
        return None
    if entry.misses >= MISS_STREAK:
        entry.passed_over += 1
        if entry.passed_over % RETRY_EVERY:
            return None
    answer = context.run_within(entry.program, entry.static_cost, entry.cost_limit)
    found = _read_listed(entry, policies, answer) if answer.__class__ is list else _read(entry, policies, answer)
    if found is None:
        entry.misses += 1
    else:
        entry.answered += 1
        entry.misses = 0
    return found


#: The longest engine input (``object``, ``oldObject`` and ``request`` as pruned, in JSON) whose answer is kept, and
#: the most its answer may publish: what a set of policies reads of a request is usually a few hundred bytes, and
#: what is kept across requests must stay small whatever a request holds.
LONGEST_KEPT_INPUT = 4096


class KeptAnswerLookups(threading.local):
    """How often this process looked for a kept answer and found one, or not (``/metrics``). Counted per thread:
    ``/metrics`` reads the serving thread's (the event loop's), so the daemon's analysis thread, which replays
    control-plane writes against a snapshot of its own, does not count as traffic."""

    def __init__(self) -> None:
        self.found = 0
        self.not_found = 0


#: This process's look-ups, over every snapshot it served.
LOOKUPS = KeptAnswerLookups()


class AnswersByInput:
    """All-clear answers kept across the requests evaluated against one snapshot (``Snapshot.kept``), by set program
    and by what the engine was given: a program's answer and cost are a function of its input and nothing else
    (a set that reads namespaceObject or asks the authorizer is never kept), so a request whose pruned object, old
    object and request fields are the same JSON as an earlier one's (the pods of one ReplicaSet, a controller's
    repeated updates) gets the answer the engine gave that one. Only all-clear answers are kept (never one cut short
    by a deadline or an engine failure), at most ``LIMIT`` (then emptied), of inputs up to ``LONGEST_KEPT_INPUT``.

    Keys and answers are flat tuples of strings and numbers, which the garbage collector stops tracking: answers
    kept as objects survive into its oldest generation and make it walk the whole heap every few thousand requests
    (~40 µs a request at 100 policies when every request is new)."""

    __slots__ = ("_answers",)

    LIMIT = 1024

    def __init__(self) -> None:
        #: (set program's serial, its input in JSON) -> how many policies, when each applies and publishes nothing
        #: (most requests); otherwise per policy: the false condition's name or None, how many annotations it
        #: publishes, then their keys and values.
        self._answers: dict[tuple[int, bytes], int | tuple[Any, ...]] = {}

    @staticmethod
    def of(snapshot: Snapshot) -> AnswersByInput:
        return snapshot.kept_for(_KEPT_KEY, AnswersByInput)

    @staticmethod
    def worth_looking_up(entry: SetProgram) -> bool:
        """Whether to key this request's input: always, unless the set's inputs have not recurred for a while."""
        if entry.inputs_missed < INPUT_MISS_STREAK:
            return True
        entry.inputs_passed_over += 1
        return entry.inputs_passed_over % INPUT_RETRY_EVERY == 0

    def answer(self, entry: SetProgram, key: bytes | None) -> list[PolicyClear] | None:
        """The answer kept for ``key`` (None: an input too long to key, which counts as not found)."""
        flat = self._answers.get((entry.serial, key)) if key is not None else None
        if flat is None:
            entry.inputs_missed += 1
            LOOKUPS.not_found += 1
            return None
        entry.inputs_missed = 0
        LOOKUPS.found += 1
        if flat.__class__ is int:
            return [_APPLIES_SILENTLY] * cast(int, flat)
        flat = cast(tuple[Any, ...], flat)
        found = []
        index, end = 0, len(flat)
        while index < end:
            skipped_by, count = flat[index], flat[index + 1]
            index += 2
            if skipped_by is not None:
                found.append(_skipped_by(skipped_by))
            elif not count:
                found.append(_APPLIES_SILENTLY)
            else:
                published = flat[index:index + 2 * count]
                found.append(PolicyClear(None, tuple(zip(published[::2], published[1::2], strict=True))))
                index += 2 * count
        return found

    def keep(self, entry: SetProgram, key: bytes, found: list[PolicyClear]) -> None:
        kept: int | tuple[Any, ...] = len(found)
        if any(clear is not _APPLIES_SILENTLY for clear in found):
            flat: list[Any] = []
            size = 0
            for clear in found:
                published = clear.published
                flat += (clear.skipped_by, len(published))
                for pair in published:
                    flat += pair
                    size += len(pair[1])
            if size > LONGEST_KEPT_INPUT:
                return
            kept = tuple(flat)
        keep_bounded(self._answers, (entry.serial, key), kept, self.LIMIT)


_KEPT_KEY = "all-clear"


def input_key(given: tuple[Any, ...]) -> bytes | None:
    """``given`` (the engine's input) as the key of a kept answer: JSON tells apart everything CEL does (1, 1.0 and
    true; -0.0; key order, which iteration sees); None when it is too long to keep or not JSON orjson writes."""
    try:
        key = orjson.dumps(given)
    except orjson.JSONEncodeError:
        return None
    return key if len(key) <= LONGEST_KEPT_INPUT else None


#: The longest answer (in JSON) whose reading a set program keeps (``SetProgram.last_reading``).
LONGEST_KEPT_ANSWER = 1024


def _read_listed(entry: SetProgram, policies: Sequence[CompiledValidatingPolicy],
                 answer: list[Any]) -> list[PolicyClear] | None:
    """``_read`` of a listed answer, or what reading the same answer found last time: JSON tells apart what reading
    does (0 and false, 1 and 1.0, every string), so the same JSON is the same reading. Callers only read it."""
    try:
        key = orjson.dumps(answer)
    except orjson.JSONEncodeError:
        return _read(entry, policies, answer)
    last = entry.last_reading
    if last is not None and last[0] == key:
        return last[1]
    found = _read(entry, policies, answer)
    if found is not None and len(key) <= LONGEST_KEPT_ANSWER:
        entry.last_reading = (key, found, None)
    return found


def _read(entry: SetProgram, policies: Sequence[CompiledValidatingPolicy], answer: Any) -> list[PolicyClear] | None:
    if not entry.layout.listed:
        return [_APPLIES_SILENTLY] * len(policies) if answer is True else None
    if answer.__class__ is not list:
        return None
    found = []
    for compiled, (slot, start, keys) in zip(policies, entry.readings, strict=True):
        if slot >= 0 and answer[slot] != APPLIES:
            found.append(_skipped_by(compiled.match_conditions[answer[slot] - 1][0].name))
            continue
        if not keys:
            found.append(_APPLIES_SILENTLY)
            continue
        published = []
        for offset, key in enumerate(keys):
            value = answer[start + offset]
            if value is False:
                # Null, or its policy did not apply.
                continue
            if value.__class__ is not str:
                # Not a string or null: an error of the exact evaluation's to report.
                return None
            if trimmed := gofmt.trim_space(value):
                published.append((key, trimmed))
        found.append(PolicyClear(None, tuple(published)))
    return found
