"""`topicmatch.TopicStore`: retained messages found by a filter. Against a dict scanned with
reference.py (the independent statement of the semantics) on random workloads in every
dialect; the MQTT 5 retained-message cases (§3.3.1.3, §4.7.2: `$` topics and `#`'s parent);
the dict protocol, typed errors that change nothing, pickling, and threads."""

from __future__ import annotations

import pickle
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import patterns, topics

import topicmatch as tm

import reference


@st.composite
def workloads(draw):
    dialect = draw(st.sampled_from(tm.DIALECTS))
    op = st.one_of(
        st.tuples(st.just("set"), topics(dialect), st.integers(0, 9)),
        st.tuples(st.just("delete"), topics(dialect)),
        st.tuples(st.just("match"), patterns(dialect)),
    )
    return dialect, draw(st.lists(op, max_size=50))


@settings(max_examples=300, deadline=None)
@given(workloads())
def test_the_store_equals_a_scanned_dict(workload):
    dialect, ops = workload
    store = tm.TopicStore(dialect)
    kept: dict[str, int] = {}
    for op in ops:
        if op[0] == "set":
            _, t, v = op
            assert store.set(t, v) == kept.get(t)
            kept[t] = v
        elif op[0] == "delete":
            t = op[1]
            assert store.delete(t) is (t in kept)
            kept.pop(t, None)
        else:
            f = op[1]
            want = sorted((t, v) for t, v in kept.items() if reference.matches(dialect, f, t))
            assert sorted(store.match(f)) == want, f
        assert len(store) == len(kept)
    assert sorted(store.items()) == sorted(kept.items())
    assert sorted(store) == sorted(kept)


def test_mqtt_retained_messages_by_filter():
    store = tm.TopicStore("mqtt")
    for t in ("sport/tennis/player1", "sport/tennis/player1/ranking", "sport", "$SYS/uptime"):
        store[t] = f"msg {t}"
    assert sorted(t for t, _ in store.match("sport/#")) == [
        "sport",
        "sport/tennis/player1",
        "sport/tennis/player1/ranking",
    ]
    assert [t for t, _ in store.match("sport/tennis/+")] == ["sport/tennis/player1"]
    assert [t for t, _ in store.match("#") if t.startswith("$")] == []
    assert [t for t, _ in store.match("+/uptime")] == []
    assert store.match("$SYS/#") == [("$SYS/uptime", "msg $SYS/uptime")]


def test_the_dict_protocol_and_values_kept_as_themselves():
    store = tm.TopicStore("nats", [("a.b", 1)])
    payload = object()
    store["a.c"] = payload
    assert store["a.c"] is payload and store.get("a.c") is payload
    assert "a.c" in store and "a.x" not in store and "a..b" not in store and 5 not in store
    assert store.get("a.x", "none") == "none"
    with pytest.raises(KeyError):
        store["a.x"]
    del store["a.b"]
    with pytest.raises(KeyError):
        del store["a.b"]
    assert len(store) == 1 and list(store) == ["a.c"]
    assert store.dialect == "nats"
    assert repr(store) == 'TopicStore(dialect="nats", topics=1)'


def test_invalid_input_raises_typed_errors_and_changes_nothing():
    store = tm.TopicStore("mqtt", [("a/b", 1)])
    with pytest.raises(tm.InvalidTopic):
        store.set("a/+", 2)
    with pytest.raises(tm.InvalidTopic):
        store.get("")
    with pytest.raises(tm.InvalidPattern):
        store.match("a/#/b")
    with pytest.raises(TypeError):
        store.set(3, 1)
    with pytest.raises(ValueError, match="unknown dialect"):
        tm.TopicStore("kafka")
    assert store.items() == [("a/b", 1)]


def test_pickling_keeps_topics_and_values():
    store = tm.TopicStore("amqp", [("", "empty"), ("a.b", [1, 2]), ("a", None)])
    copy = pickle.loads(pickle.dumps(store))
    assert sorted(copy.items(), key=repr) == sorted(store.items(), key=repr)
    assert copy.dialect == "amqp" and copy.match("#.b") == [("a.b", [1, 2])]


def test_readers_beside_a_writer_thread():
    store = tm.TopicStore("mqtt")
    topics = [f"s/{i % 5}/{i}" for i in range(2000)]
    stop = threading.Event()
    errors: list[str] = []

    def read():
        while not stop.is_set():
            got = store.match("s/+/#")
            if len({t for t, _ in got}) != len(got):
                errors.append("a topic answered twice")
            for t, v in got:
                if t != topics[v]:
                    errors.append(f"{t} holds the value of {topics[v]}")

    readers = [threading.Thread(target=read) for _ in range(2)]
    for r in readers:
        r.start()
    for rnd in range(5):
        for i, t in enumerate(topics):
            if (i + rnd) % 4:
                store[t] = i
            else:
                store.delete(t)
    stop.set()
    for r in readers:
        r.join()
    assert errors == []
