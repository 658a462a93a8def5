"""Fast, concurrent topic matching for AMQP, MQTT and NATS subscriptions.

Every matcher has the same API and the same semantics::

    import topicmatch as tm

    m = tm.CSTrie(dialect="mqtt")
    m.subscribe("sensors/+/temp", "alice")
    m.lookup("sensors/1/temp")   # ['alice']
"""

from topicmatch._core import (
    CSTrie,
    HeadersMatcher,
    InvalidPattern,
    InvalidTopic,
    InvertedBitmap,
    LazyDFA,
    LevelBitmap,
    NaiveMatcher,
    SelectorIndex,
    TopicStore,
    Trie,
    __version__,
    intersects,
    matches,
    pattern_errors,
    subsumes,
)

DIALECTS = ("amqp", "mqtt", "nats")

__all__ = [
    "CSTrie",
    "DIALECTS",
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
    "intersects",
    "matches",
    "pattern_errors",
    "subsumes",
]
