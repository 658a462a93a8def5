"""Type stubs for the native module `topicmatch._core`."""

from collections.abc import Hashable, Iterable, Iterator
from typing import Any, Literal, Protocol, Self, TypeAlias, final

_Dialect: TypeAlias = Literal["amqp", "mqtt", "nats"]
_Text: TypeAlias = str | bytes
_Pairs: TypeAlias = Iterable[tuple[_Text, Hashable] | tuple[_Text, Hashable, str]]

class _ArrowArrayExportable(Protocol):
    """An Arrow array by the PyCapsule interface (pyarrow.Array, nanoarrow, arro3, ...)."""

    def __arrow_c_array__(
        self, requested_schema: object | None = None
    ) -> tuple[object, object]: ...

__version__: str
__all__ = [
    "CSTrie",
    "HeadersMatcher",
    "InvalidPattern",
    "InvalidTopic",
    "InvertedBitmap",
    "LazyDFA",
    "LevelBitmap",
    "NaiveMatcher",
    "SelectorIndex",
    "TopicStore",
    "Trie",
    "__version__",
    "_gil_stats",
    "intersects",
    "matches",
    "pattern_errors",
    "subsumes",
]

class InvalidPattern(ValueError):
    """A subscription pattern or selector that its dialect rejects."""

class InvalidTopic(ValueError):
    """A message topic that its dialect rejects."""

def matches(pattern: _Text, topic: _Text, dialect: _Dialect = "amqp") -> bool: ...
def intersects(a: _Text, b: _Text, dialect: _Dialect = "amqp") -> bool:
    """Whether some topic matches both patterns (NATS: the subjects collide)."""

def subsumes(a: _Text, b: _Text, dialect: _Dialect = "amqp") -> bool:
    """Whether every topic that `b` matches, `a` matches too. Raises ValueError when deciding
    it would take more than about a million steps (only AMQP patterns with `#` before other
    wildcards can ask for that)."""

def pattern_errors(patterns: _ArrowArrayExportable, dialect: _Dialect = "amqp") -> Any:
    """Why each pattern of an Arrow string array cannot be subscribed in `dialect`, as a
    pyarrow string array: null for a valid pattern, the reason `subscribe` would give for an
    invalid one, "null pattern" for a null."""

def _gil_stats() -> dict[str, int]:
    """The GIL rule's counters: decisions `released` and `kept`, and the expected waits to take
    the GIL back, `wait_ns` after batches and `write_wait_ns` after writes (for the
    benchmarks)."""

class _TopicMatcher:
    """The API every topic matcher shares (a typing aid: not a runtime base class)."""

    def __new__(cls, dialect: _Dialect = "amqp", subscriptions: _Pairs | None = None) -> Self: ...
    @property
    def dialect(self) -> _Dialect: ...
    def subscribe(self, pattern: _Text, subscriber: Hashable, group: str | None = None) -> bool:
        """True if the subscription is new. With `group`, or with an MQTT
        `$share/{group}/{filter}` pattern, `subscriber` joins the group on that filter: a
        message goes to one member of each group it matches."""

    def subscribe_many(self, subscriptions: _Pairs) -> int:
        """(pattern, subscriber) pairs and (pattern, subscriber, group) triples, all checked
        before any is added; returns how many were new."""

    def subscribe_arrow(
        self, patterns: _ArrowArrayExportable, subscribers: _ArrowArrayExportable
    ) -> int:
        """The pairs of two Arrow arrays of one length: patterns (strings) and subscribers
        (ints of any width), all checked before any is added, with the GIL released; returns
        how many were new."""

    def unsubscribe(
        self, pattern: _Text, subscriber: Hashable, group: str | None = None
    ) -> bool: ...
    def remove_subscriber(self, subscriber: Hashable) -> int: ...
    def lookup(self, topic: _Text) -> list[Hashable]:
        """Every plain subscriber of `topic` and one member of each group it matches, in turn
        (round robin), each subscriber once."""

    def lookup_groups(
        self, topic: _Text
    ) -> tuple[list[Hashable], list[tuple[str, str, list[Hashable]]]]:
        """The plain subscribers of `topic` and, per matched group, (group, filter, members)."""

    def group_subscriptions(self) -> list[tuple[str, str, Hashable]]:
        """Every (group, filter, subscriber) membership."""

    def lookup_many(self, topics: Iterable[_Text]) -> list[list[Hashable]]: ...
    def lookup_flat(self, topics: Iterable[_Text]) -> tuple[list[Hashable], list[int]]:
        """`(subscribers, ends)`: every topic's answer in one list, the subscribers of
        `topics[i]` being `subscribers[ends[i]:ends[i + 1]]` (`ends[0]` is 0, and `ends` has
        one more item than `topics`). The lookups of `lookup_many`, without a list per topic:
        for batches whose answers are large."""

    def lookup_arrow(
        self, topics: _ArrowArrayExportable, names: _ArrowArrayExportable | None = None
    ) -> tuple[Any, Any]:
        """`(subscribers, reasons)` for an Arrow string array, as two pyarrow arrays:
        `list<int64>` (the int subscribers of each topic, null for a rejected one) and
        `string` (null, or why the topic was rejected). Subscribers must be ints. With
        `names` (an Arrow string array), each subscriber is a row of it and `subscribers` is
        `list<string>` of those rows' text, made in the same pass (`ValueError` for a
        subscriber that is no row of `names`, or a null one)."""

    def count(self, topic: _Text) -> int: ...
    def count_many(self, topics: Iterable[_Text]) -> list[int]: ...
    def has_interest(self, topic: _Text) -> bool:
        """Whether any pattern matches `topic` (NATS: HasInterest)."""

    def reverse_match(self, pattern: _Text) -> list[tuple[str, Hashable]]:
        """The (pattern, subscriber) pairs whose patterns share at least one topic with
        `pattern` (NATS: ReverseMatch); a scan of every pair."""

    def subscriptions(self) -> list[tuple[str, Hashable]]:
        """The plain (pattern, subscriber) pairs."""

    def __len__(self) -> int:
        """Plain pairs and group memberships."""

    def __reduce__(
        self,
    ) -> tuple[
        type[Self],
        tuple[str, list[tuple[str, Hashable] | tuple[str, Hashable, str]]],
        int,
    ]: ...
    def __setstate__(self, state: int) -> None: ...

@final
class NaiveMatcher(_TopicMatcher):
    """Tests every pattern on every lookup: the oracle and the baseline."""

class _Cached(_TopicMatcher):
    """What the matchers with a result cache add (a typing aid: not a runtime base class)."""

    def __new__(
        cls,
        dialect: _Dialect = "amqp",
        subscriptions: _Pairs | None = None,
        cache_size: int = 16384,
    ) -> Self: ...
    @property
    def cache_size(self) -> int:
        """Most lookup results the cache holds (0: no cache)."""
    def cache_stats(self) -> dict[str, int]:
        """The result cache's counters: hits, misses (bypassed ones included), bypassed
        (lookups that skipped the cache while admission had it off), evictions, topics
        (entries held), bytes, capacity, max_bytes and admitting (1 while on)."""

@final
class Trie(_Cached):
    """A word trie behind one reader-writer lock (RabbitMQ, ZeroMQ, NATS sublist)."""

@final
class CSTrie(_Cached):
    """The lock-free concurrent subscription trie (Ctrie-derived), with O(1) snapshots."""

    def snapshot(self) -> CSTrie:
        """A read-only CSTrie frozen at this instant, in O(1); its writes raise TypeError. It
        has a result cache of its own, of the same size, empty until its first lookup."""
    @property
    def read_only(self) -> bool:
        """Whether this is a read-only snapshot."""

@final
class SelectorIndex:
    """Skipfilter-style index of URI-template, regular-expression and exact-topic selectors."""

    def __new__(
        cls, cache_size: int = 100000, subscriptions: _Pairs | None = None
    ) -> SelectorIndex: ...
    def subscribe(self, selector: _Text, subscriber: Hashable) -> bool:
        """Subscribes to `*`, an exact topic, an RFC 6570 URI template or `re:<regex>`. A
        selector holding `{` that is not a valid template admits only its own text (Mercure's
        rule); an invalid `re:` pattern or the empty selector raises InvalidPattern."""
    def unsubscribe(self, selector: _Text, subscriber: Hashable) -> bool: ...
    def remove_subscriber(self, subscriber: Hashable) -> int: ...
    def lookup(self, topics: _Text | Iterable[_Text]) -> list[Hashable]: ...
    def subscriptions(self) -> list[tuple[str, Hashable]]: ...
    def cache_stats(self) -> dict[str, int]: ...
    def __len__(self) -> int: ...
    def __reduce__(
        self,
    ) -> tuple[type[SelectorIndex], tuple[int, list[tuple[str, Hashable]]], int]: ...
    def __setstate__(self, state: int) -> None: ...

@final
class LevelBitmap(_TopicMatcher):
    """The optimized inverted bitmap (WSO2): one row per word position, ANDed per level."""

@final
class InvertedBitmap(_TopicMatcher):
    """One roaring bitmap of matching patterns per topic seen, kept current (OpenAMQ)."""

    def __new__(
        cls,
        dialect: _Dialect = "amqp",
        subscriptions: _Pairs | None = None,
        cache_size: int = 100000,
    ) -> InvertedBitmap: ...
    @property
    def cache_size(self) -> int:
        """Most topics the lookup cache holds (0: no cache)."""

@final
class LazyDFA(_TopicMatcher):
    """The lazy DFA of RabbitMQ's topic-exchange study: DFA states built while matching, within
    a memory budget."""

    def __new__(
        cls,
        dialect: _Dialect = "amqp",
        subscriptions: _Pairs | None = None,
        cache_bytes: int = 67108864,
    ) -> LazyDFA: ...
    @property
    def cache_bytes(self) -> int:
        """The state cache's memory budget in bytes."""
    def stats(self) -> dict[str, int]:
        """The state cache's figures: states, transitions, bytes (taken since the last flush,
        counted against budget), budget, flushes (times a full cache was emptied), fallbacks
        (lookups answered from the NFA because the budget could not hold them), invalidations
        (states a write reset), compactions (NFA rebuilds) and nodes (of the NFA)."""
    def clear_cache(self) -> None:
        """Empties the state cache: states are built again by the lookups that need them."""

_Mode: TypeAlias = Literal["all", "any", "all-with-x", "any-with-x"]
#: A header value: an AMQP field table's types as Python clients send them. Ints are signed
#: 64-bit; `None` is void (as a criterion's top-level value: "present with any value").
_HeaderValue: TypeAlias = (
    str
    | bytes
    | bytearray
    | int
    | float
    | bool
    | None
    | dict[str, _HeaderValue]
    | list[_HeaderValue]
    | tuple[_HeaderValue, ...]
)
_Criteria: TypeAlias = dict[str, _HeaderValue]
_Headers: TypeAlias = dict[str, _HeaderValue]

@final
class HeadersMatcher:
    """Content-based routing on headers (OpenAMQ, the AMQP headers exchange). Values are
    compared as RabbitMQ compares them (docs/headers.md): ints of any width by value, never
    equal to a float or a bool; a str equals bytes of its UTF-8 at the top level only; floats
    by their bits (0.0 is not -0.0, NaN equals NaN); tables and arrays in order."""

    def __new__(
        cls, subscriptions: Iterable[tuple[_Criteria, Hashable, _Mode]] | None = None
    ) -> HeadersMatcher: ...
    def subscribe(
        self, criteria: _Criteria, subscriber: Hashable, match: _Mode = "all"
    ) -> bool: ...
    def unsubscribe(
        self, criteria: _Criteria, subscriber: Hashable, match: _Mode = "all"
    ) -> bool: ...
    def remove_subscriber(self, subscriber: Hashable) -> int: ...
    def lookup(self, headers: _Headers) -> list[Hashable]: ...
    def hits(self, headers: _Headers) -> dict[Hashable, int]: ...
    def subscriptions(self) -> list[tuple[_Criteria, Hashable, str]]:
        """Every subscription, values as the types they were given (`bytearray` comes back
        as `bytes`, `tuple` as `list`)."""

    def __len__(self) -> int: ...
    def __reduce__(self) -> tuple[type[HeadersMatcher], tuple[list[object]], int]: ...
    def __setstate__(self, state: int) -> None: ...

@final
class TopicStore:
    """Values kept per topic, found by topic or by a filter: an MQTT broker's retained
    messages. Dict-like (`store[topic] = v`, `store[topic]`, `del store[topic]`, `in`,
    `len`, iteration over the topics); `match(filter)` returns the stored (topic, value) pairs
    the filter matches, in time that grows with what it reaches, not with the store."""

    def __new__(
        cls, dialect: _Dialect = "amqp", items: Iterable[tuple[_Text, object]] | None = None
    ) -> Self: ...
    @property
    def dialect(self) -> _Dialect: ...
    def set(self, topic: _Text, value: object) -> object | None:
        """Keeps `value` for `topic`; returns the value it replaces, or None."""

    def get(self, topic: _Text, default: object | None = None) -> object | None: ...
    def delete(self, topic: _Text) -> bool:
        """Removes `topic`; True if it had a value."""

    def match(self, filter: _Text) -> list[tuple[str, object]]: ...
    def items(self) -> list[tuple[str, object]]: ...
    def __len__(self) -> int: ...
    def __contains__(self, key: object, /) -> bool: ...
    def __getitem__(self, key: _Text, /) -> object: ...
    def __setitem__(self, key: _Text, value: object, /) -> None: ...
    def __delitem__(self, key: _Text, /) -> None: ...
    def __iter__(self) -> Iterator[str]: ...
    def __reduce__(self) -> tuple[type[Self], tuple[str, list[tuple[str, object]]], int]: ...
    def __setstate__(self, state: int) -> None: ...
