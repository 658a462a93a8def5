"""amqtt 0.12.1 routed by topicmatch: `TopicmatchBroker`, a drop-in subclass of amqtt's `Broker`.

Stock amqtt routes a published message by testing every subscription filter against its topic
(`Broker._run_broadcast` calls `Broker._matches` once per filter in `Broker._subscriptions`),
and answers a new subscription's retained messages by testing the filter against every retained
topic (`_publish_retained_messages_for_subscription`). Both are linear scans in Python. This
module keeps two indexes beside amqtt's own dicts and asks them instead:

- the filters of `_subscriptions` in a `topicmatch.CSTrie("mqtt")`, one entry per filter (the
  subscriber is the filter string itself: amqtt keeps the sessions of a filter in the dict's
  list, and the index only has to say which filters match a topic);
- the topics of `_retained_messages` in a `topicmatch.TopicStore("mqtt")`.

The seam, and why. amqtt's plugins cannot route: they see events and may veto a delivery
(`topic_filtering`), but `_run_broadcast` chooses the filters itself. So this is a subclass, and
it touches amqtt in three places, nothing else:

1. `_subscriptions` and `_retained_messages` become `dict` subclasses (`SubscriptionIndex`,
   `RetainedIndex`) that update their index in every method that adds or removes a key
   (`d[k] = v`, `del`, `pop`, `popitem`, `clear`, `update`, `setdefault`, `|=`). Properties of
   the subclass wrap whatever dict is assigned to either name: by `Broker.__init__`, before it
   loads any plugin, or by anyone later. Keeping the index in step at the dict, rather than in
   the broker methods that mutate it, covers every writer there is in amqtt 0.12.1:
   `add_subscription` (SUBSCRIBE, and plugins through `BrokerContext.add_subscription`),
   `_del_all_subscriptions` (clean-session CONNECT through `_delete_session`, the session
   monitor's `_cleanup_session` of disconnected clean, anonymous or expired sessions,
   `shutdown`), `start` (`clear`), `retain_message` (set, and delete on an empty payload),
   `shutdown` (`clear`), and plugins writing through `BrokerContext.retained_messages`
   (contrib's `SessionDBPlugin` restores retained messages that way). UNSUBSCRIBE only pops a
   session from a filter's list and leaves the key (amqtt keeps filters with empty lists until
   a session is deleted), so it needs no index change. Reads (`d[k]`, `in`, iteration) are the
   plain `dict` ones, at the plain `dict` speed.
2. `_run_broadcast` is amqtt 0.12.1's own body, with the loop over every filter replaced by the
   filters the index matches. That is why the module is pinned to amqtt 0.12.1 (checked at
   import): the copied body is that version's.
3. `_publish_retained_messages_for_subscription`, likewise, asks the `TopicStore`.

Semantics are amqtt's, exactly:

- The filters a topic matches are those `Broker._matches` accepts, in the dict's order (the order
  filters were first subscribed), so deliveries are made in the same order; a client subscribed
  by two matching filters gets two copies, at each subscription's QoS, as in amqtt. Retained
  messages come in the order of `_retained_messages`.
- `$` topics: a filter whose first level is `+` or `#` matches none (MQTT-4.7.2-1), in amqtt and
  in topicmatch's `mqtt` dialect alike.
- `$share`: amqtt 0.12.1 has no shared subscriptions. `$share/g/a/+` is to it an ordinary filter
  that matches only topics whose first level is the literal `$share` (which clients cannot
  publish: amqtt closes a connection that publishes to a `$` topic; internal broadcasts can).
  topicmatch would read it as group `g` on `a/+`, so filters whose first level is `$share` go to
  a second trie with that level spelt `s`, and only topics whose first level is `$share` are
  looked up there, spelt the same way. The two sets of topics are disjoint, and a filter of one
  can match no topic of the other, so the split is exact.
- A filter or topic that topicmatch rejects and amqtt takes (an empty filter, a NUL, a key that
  is not a `str`) is kept aside and tested with `Broker._matches`, as amqtt would; a topic the
  index cannot look up falls back to amqtt's scan. Nothing is ever answered differently.

What is not amqtt's, on purpose: the filters are chosen before the first delivery, not while
iterating the live dict, so a subscription made during an `await` inside the loop (a topic
filtering plugin that yields) does not raise "dictionary changed size during iteration" as it
can in stock amqtt; and the per-filter "does not match" debug line is not logged.

Use it where you would use `amqtt.broker.Broker`::

    from topicmatch_broker import TopicmatchBroker
    broker = TopicmatchBroker(config)   # an amqtt BrokerConfig or dict, as for Broker
    await broker.start()
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

import amqtt
from amqtt.broker import Broker, RetainedApplicationMessage
from amqtt.contexts import Action
from amqtt.mqtt.constants import QOS_1, QOS_2
from amqtt.session import OutgoingApplicationMessage, Session
from amqtt.utils import format_client_message

import topicmatch as tm

AMQTT_VERSION = "0.12.1"
"""The amqtt release whose `_run_broadcast` and retained-message lookup this module copies."""


class UnsupportedAmqttVersion(ImportError):
    """amqtt is not the release this module was written against."""


if amqtt.__version__ != AMQTT_VERSION:
    raise UnsupportedAmqttVersion(
        f"topicmatch_broker replaces parts of amqtt {AMQTT_VERSION} and would route wrongly on "
        f"another release: amqtt {amqtt.__version__} is installed "
        f"(pip install amqtt=={AMQTT_VERSION})"
    )

__all__ = [
    "AMQTT_VERSION",
    "RetainedIndex",
    "SubscriptionIndex",
    "TopicmatchBroker",
    "UnsupportedAmqttVersion",
]

_SHARE = "$share"
_MISSING = object()


def _first_level_is_share(s: str) -> bool:
    return s.startswith(_SHARE) and (len(s) == len(_SHARE) or s[len(_SHARE)] == "/")


def _share_spelling(s: str) -> str:
    """`$share/rest` spelt `s/rest` (and `$share` spelt `s`): an ordinary MQTT filter or topic."""
    return "s" + s[len(_SHARE) :]


class _IndexedDict(dict):
    """A `dict` that tells its index of every key it gains or loses, with the order of keys.

    `_order[key]` is a counter taken when the key was added, so sorting keys by it gives the
    dict's own iteration order (a dict keeps a key's place when its value is replaced and puts
    a key that was deleted and added again at the end, as the counter does). Subclasses keep
    the index in `_index_add`, `_index_remove` and `_index_clear`, which must not raise."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()
        self._order: dict[Any, int] = {}
        self._next = 0
        self.update(*args, **kwargs)

    # the index, for subclasses
    def _index_add(self, key: Any) -> None:
        raise NotImplementedError

    def _index_remove(self, key: Any) -> None:
        raise NotImplementedError

    def _index_clear(self) -> None:
        raise NotImplementedError

    def _added(self, key: Any) -> None:
        self._order[key] = self._next
        self._next += 1
        self._index_add(key)

    def _removed(self, key: Any) -> None:
        del self._order[key]
        self._index_remove(key)

    def _in_dict_order(self, keys: Iterable[Any]) -> list[Any]:
        return sorted(keys, key=self._order.__getitem__)

    # every dict method that adds or removes a key
    def __setitem__(self, key: Any, value: Any) -> None:
        new = key not in self
        super().__setitem__(key, value)
        if new:
            self._added(key)

    def __delitem__(self, key: Any) -> None:
        super().__delitem__(key)
        self._removed(key)

    def pop(self, key: Any, default: Any = _MISSING) -> Any:
        if key in self:
            value = super().pop(key)
            self._removed(key)
            return value
        if default is _MISSING:
            raise KeyError(key)
        return default

    def popitem(self) -> tuple[Any, Any]:
        key, value = super().popitem()
        self._removed(key)
        return key, value

    def clear(self) -> None:
        super().clear()
        self._order.clear()
        self._index_clear()

    def setdefault(self, key: Any, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return super().__getitem__(key)

    def update(self, *args: Any, **kwargs: Any) -> None:
        if len(args) > 1:
            raise TypeError(f"update expected at most 1 argument, got {len(args)}")
        if args:
            other = args[0]
            if hasattr(other, "keys"):
                for key in other.keys():
                    self[key] = other[key]
            else:
                for key, value in other:
                    self[key] = value
        for key, value in kwargs.items():
            self[key] = value

    def __ior__(self, other: Any) -> _IndexedDict:
        self.update(other)
        return self

    def copy(self) -> dict:
        """A plain `dict` (the index is not copied)."""
        return dict(self)

    def __reduce__(self) -> Any:
        return (dict, (dict(self),))


class SubscriptionIndex(_IndexedDict):
    """amqtt's `_subscriptions` (filter -> [(session, qos)]) with a trie of its filters."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._trie = tm.CSTrie("mqtt")
        self._share_trie = tm.CSTrie("mqtt")
        self._aside: set[Any] = set()
        super().__init__(*args, **kwargs)

    def _index_add(self, key: Any) -> None:
        try:
            if _first_level_is_share(key):
                self._share_trie.subscribe(_share_spelling(key), key)
            else:
                self._trie.subscribe(key, key)
        except (TypeError, ValueError, AttributeError):
            self._aside.add(key)

    def _index_remove(self, key: Any) -> None:
        if key in self._aside:
            self._aside.discard(key)
        elif _first_level_is_share(key):
            self._share_trie.unsubscribe(_share_spelling(key), key)
        else:
            self._trie.unsubscribe(key, key)

    def _index_clear(self) -> None:
        self._trie = tm.CSTrie("mqtt")
        self._share_trie = tm.CSTrie("mqtt")
        self._aside.clear()

    def matching(
        self, topic: Any, matches: Callable[[Any, Any], bool]
    ) -> list[tuple[Any, list[tuple[Session, int]]]]:
        """The (filter, subscriptions) items whose filter `matches(topic, filter)` accepts, in
        the dict's order: what amqtt's loop over `_subscriptions.items()` would deliver to."""
        if not isinstance(topic, str):
            return [(f, subs) for f, subs in self.items() if matches(topic, f)]
        try:
            if _first_level_is_share(topic):
                found = self._share_trie.lookup(_share_spelling(topic))
            else:
                found = self._trie.lookup(topic)
        except ValueError:  # a topic topicmatch refuses (empty, a NUL, a wildcard): amqtt's scan
            return [(f, subs) for f, subs in self.items() if matches(topic, f)]
        if self._aside:
            found.extend(f for f in self._aside if matches(topic, f))
        if len(found) > 1:
            found = self._in_dict_order(found)
        get = super().__getitem__
        return [(f, get(f)) for f in found]

    def check(self) -> None:
        """Raises AssertionError unless the index holds exactly the dict's filters."""
        indexed = [f for _, f in self._trie.subscriptions()]
        indexed += [f for _, f in self._share_trie.subscriptions()]
        indexed += list(self._aside)
        assert len(indexed) == len(set(indexed)), "a filter indexed twice"
        assert set(indexed) == set(self.keys()), (
            f"index out of step: {sorted(set(indexed) ^ set(self.keys()), key=repr)}"
        )
        assert set(self._order) == set(self.keys())


class RetainedIndex(_IndexedDict):
    """amqtt's `_retained_messages` (topic -> RetainedApplicationMessage) with a TopicStore."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._store = tm.TopicStore("mqtt")
        self._aside: set[Any] = set()
        super().__init__(*args, **kwargs)

    def _index_add(self, key: Any) -> None:
        try:
            self._store[key] = None
        except (TypeError, ValueError):
            self._aside.add(key)

    def _index_remove(self, key: Any) -> None:
        if key in self._aside:
            self._aside.discard(key)
        else:
            del self._store[key]

    def _index_clear(self) -> None:
        self._store = tm.TopicStore("mqtt")
        self._aside.clear()

    def matching(
        self, topic_filter: Any, matches: Callable[[Any, Any], bool]
    ) -> list[tuple[Any, RetainedApplicationMessage]]:
        """The (topic, message) items with `matches(topic, topic_filter)`, in the dict's order."""
        try:
            found = [t for t, _ in self._store.match(topic_filter)]
        except (TypeError, ValueError):  # a filter topicmatch refuses: amqtt's scan
            return [(t, m) for t, m in self.items() if matches(t, topic_filter)]
        if self._aside:
            found.extend(t for t in self._aside if matches(t, topic_filter))
        if len(found) > 1:
            found = self._in_dict_order(found)
        get = super().__getitem__
        return [(t, get(t)) for t in found]

    def check(self) -> None:
        """Raises AssertionError unless the store holds exactly the dict's topics."""
        indexed = list(self._store) + list(self._aside)
        assert len(indexed) == len(set(indexed)), "a topic indexed twice"
        assert set(indexed) == set(self.keys()), (
            f"index out of step: {sorted(set(indexed) ^ set(self.keys()), key=repr)}"
        )
        assert set(self._order) == set(self.keys())


class TopicmatchBroker(Broker):
    """`amqtt.broker.Broker` whose routing and retained-message lookup use topicmatch."""

    # Broker.__init__ assigns `self._subscriptions = {}` and `self._retained_messages = {}`
    # before it loads the plugins; these properties turn whatever dict is assigned into an
    # indexed one, so no plugin or later assignment ever sees an unindexed dict.
    @property
    def _subscriptions(self) -> SubscriptionIndex:
        return self._tm_subscriptions

    @_subscriptions.setter
    def _subscriptions(self, value: dict) -> None:
        if not isinstance(value, SubscriptionIndex):
            value = SubscriptionIndex(value)
        self._tm_subscriptions = value

    @property
    def _retained_messages(self) -> RetainedIndex:
        return self._tm_retained_messages

    @_retained_messages.setter
    def _retained_messages(self, value: dict) -> None:
        if not isinstance(value, RetainedIndex):
            value = RetainedIndex(value)
        self._tm_retained_messages = value

    def matching_subscriptions(self, topic: str) -> list[tuple[str, list[tuple[Session, int]]]]:
        """(filter, [(session, qos)]) for every filter `topic` matches, in amqtt's order."""
        return self._subscriptions.matching(topic, self._matches)

    def matching_retained(self, topic_filter: str) -> list[tuple[str, RetainedApplicationMessage]]:
        """(topic, retained message) for every retained topic `topic_filter` matches."""
        return self._retained_messages.matching(topic_filter, self._matches)

    def check_indexes(self) -> None:
        """Raises AssertionError unless both indexes hold exactly what amqtt's dicts hold."""
        self._subscriptions.check()
        self._retained_messages.check()

    # amqtt 0.12.1's Broker._run_broadcast, with the scan of every filter replaced by the index
    async def _run_broadcast(
        self, running_tasks: deque[asyncio.Task[OutgoingApplicationMessage]]
    ) -> None:
        """Process a single broadcast message."""
        broadcast = await self._broadcast_queue.get()

        self.logger.debug(f"Processing broadcast message: {broadcast}")

        for _k_filter, subscriptions in self.matching_subscriptions(broadcast["topic"]):
            for target_session, sub_qos in subscriptions:
                qos = broadcast.get("qos", sub_qos)

                sendable = await self._topic_filtering(
                    target_session, topic=broadcast["topic"], action=Action.RECEIVE
                )
                if not sendable:
                    self.logger.info(
                        f"{target_session.client_id} not allowed to receive messages from "
                        f"TOPIC {broadcast['topic']}."
                    )
                    continue

                # Retain all messages which cannot be broadcasted, due to the session not being
                # connected but only when clean session is false and qos is 1 or 2
                # [MQTT 3.1.2.4] and, if a client used anonymous authentication, there is no
                # expectation that messages should be retained
                if (
                    target_session.transitions.state != "connected"
                    and not target_session.clean_session
                    and qos in (QOS_1, QOS_2)
                    and not target_session.is_anonymous
                ):
                    self.logger.debug(
                        f"Session {target_session.client_id} is not connected, retaining message."
                    )
                    await self._retain_broadcast_message(broadcast, qos, target_session)
                    continue

                # Only broadcast the message to connected clients
                if target_session.transitions.state != "connected":
                    continue

                self.logger.debug(
                    "Broadcasting message from "
                    f"{format_client_message(session=broadcast['session'])}"
                    f" on topic '{broadcast['topic']}' to "
                    f"{format_client_message(session=target_session)}",
                )

                handler = self._get_handler(target_session)
                if handler:
                    task = asyncio.ensure_future(
                        handler.mqtt_publish(
                            broadcast["topic"],
                            broadcast["data"],
                            qos,
                            retain=False,
                        ),
                    )
                    running_tasks.append(task)

    # amqtt 0.12.1's, with the scan of every retained topic replaced by the TopicStore
    async def _publish_retained_messages_for_subscription(
        self, subscription: tuple[str, int], session: Session
    ) -> None:
        self.logger.debug(
            f"Begin broadcasting messages retained due to subscription on '{subscription[0]}'"
            f" from {format_client_message(session=session)}",
        )
        publish_tasks = []

        topic_filter, qos = subscription
        for topic, retained in self.matching_retained(topic_filter):
            self.logger.debug(f"{topic} and {topic_filter} match")
            handler = self._get_handler(session)
            if handler:
                publish_tasks.append(
                    asyncio.Task(
                        handler.mqtt_publish(
                            retained.topic,
                            retained.data,
                            min(qos, retained.qos or qos),
                            retain=True,
                        ),
                    ),
                )
        if publish_tasks:
            await asyncio.wait(publish_tasks)
        self.logger.debug(
            f"End broadcasting messages retained due to subscription on '{subscription[0]}'"
            f" from {format_client_message(session=session)}",
        )
