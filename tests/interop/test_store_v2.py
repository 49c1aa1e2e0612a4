# SPDX-License-Identifier: MIT
"""`muster store` against the wire formats of ../shared/spec/tcpstore.md:
the v2 dialect (torch 2.x) byte by byte (sections 2, 3, 5, 6 and the
captured examples), plus v1 raw traffic that torch 1.13's Python API cannot
produce (WATCH_KEY) and the two dialects sharing one key space (section 10).

The peer is storepeer.Client, written from the spec: it sends exactly what
torch sends. Reply bytes are compared exactly."""

import select
import socket
import threading
import time

import pytest

from storefix import muster_store, stack, store  # noqa: F401 (fixtures)
from storepeer import (INT64_MAX, INT64_MIN, KEY_CALLBACK_REGISTERED,
                       KEY_CREATED, KEY_DELETED, KEY_UPDATED, NOT_READY,
                       READY, STOP_WAITING, WAIT_CANCELED, Client,
                       WaitTimeout, hello, i64, keylist, request, s, u8, u32,
                       u64)


def hx(text):
    """Bytes from a spec-style dump: hex pairs, "|" separators ignored."""
    return bytes.fromhex(text.replace("|", " "))


def v2req(op, *fields):
    return request("v2", op, *fields)


def v1req(op, *fields):
    return request("v1", op, *fields)


@pytest.fixture
def v2(store, stack):
    return stack.enter_context(store.client("v2"))


@pytest.fixture
def other(store, stack):
    """A second v2 connection (writer, observer)."""
    return stack.enter_context(store.client("v2", nonce=0xA5A5A5A5))


def assert_alive(client, nonce=0x0BADF00D):
    """The connection is open, in sync, and nothing is pending on it."""
    assert client.ping(nonce) == nonce


# ---- handshake (section 2) ----

def test_handshake_is_one_segment_and_echoes_the_nonce(store, stack):
    raw = stack.enter_context(store.raw())
    raw.send(hx("00 ce f7 85 3c 0d 78 56 34 12"))
    assert raw.recv_exact(4) == hx("78 56 34 12")
    raw.assert_silent()


def test_validate_alone_has_no_reply(store, stack):
    raw = stack.enter_context(store.raw())
    raw.send(v2req("VALIDATE", u32(0x3C85F7CE)))
    raw.assert_silent()
    raw.send(v2req("PING", u32(0xFFFFFFFF)))
    assert raw.recv_exact(4) == b"\xff\xff\xff\xff"


def test_ping_later_in_the_session(v2):
    v2.set("x", b"1")
    assert v2.ping(0) == 0
    assert v2.add("n", 1) == 1
    assert v2.ping(0xDEADBEEF) == 0xDEADBEEF
    v2.send(v2req("PING", u32(1)) + v2req("PING", u32(2)) +
            v2req("PING", u32(3)))
    assert v2.recv_exact(12) == u32(1) + u32(2) + u32(3)
    v2.assert_silent()


# ---- the captured example (section 5) ----

SET_K_V1 = "00 | 02 00 00 00 00 00 00 00 2f 6b | 03 00 00 00 00 00 00 00 76 00 77"
WAIT_K_V1 = "05 | 01 00 00 00 00 00 00 00 | 02 00 00 00 00 00 00 00 2f 6b"
GET_K_V1 = "02 | 02 00 00 00 00 00 00 00 2f 6b"
VALUE_REPLY = "03 00 00 00 00 00 00 00 76 00 77"


def test_captured_example_v1(store, stack):
    """1.13's `set("k", b"v\\0w")` then `get("k")`, byte for byte; the
    opcode goes in its own send, as 1.13 sends it."""
    raw = stack.enter_context(store.raw())
    for dump in (SET_K_V1, WAIT_K_V1, GET_K_V1):
        opcode, rest = hx(dump)[:1], hx(dump)[1:]
        raw.send_pieces([opcode])
        raw.send_pieces([rest])
        if dump == SET_K_V1:
            raw.assert_silent()
        elif dump == WAIT_K_V1:
            assert raw.recv_exact(1) == hx("00")
        else:
            assert raw.recv_exact(11) == hx(VALUE_REPLY)
    raw.assert_silent()


def test_captured_example_v2(store, stack):
    """The same in 2.x: opcodes 01, 06, 03 after the handshake."""
    raw = stack.enter_context(store.raw())
    raw.send(hx("00 ce f7 85 3c 0d") + u32(4242))
    assert raw.recv_exact(4) == u32(4242)
    raw.send(hx("01" + SET_K_V1[2:]))
    raw.assert_silent()
    raw.send(hx("06" + WAIT_K_V1[2:]))
    assert raw.recv_exact(1) == hx("00")
    raw.send(hx("03" + GET_K_V1[2:]))
    assert raw.recv_exact(11) == hx(VALUE_REPLY)
    raw.assert_silent()


def test_wait_timeout_cancel_bytes(store, stack):
    """`c>s 06 ...WAIT...` ... (timeout) ... `c>s 0c`, `s>c 01`."""
    raw = stack.enter_context(store.raw())
    raw.send(hello(1))
    raw.recv_exact(4)
    raw.send(v2req("WAIT", keylist([b"/never"])))
    raw.assert_silent(0.3)
    raw.send(hx("0c"))
    assert raw.recv_exact(1) == hx("01")
    raw.assert_silent()


# ---- ADD (section 5) ----

ADD_CASES = [
    # stored text before (None = missing), delta, reply
    (None, 5, 5),
    (None, -5, -5),
    (None, 0, 0),
    (b"41", 1, 42),
    (b"12abc", 1, 13),
    (b" -5", 1, -4),
    (b"\t\n\v\f\r 7", 0, 7),
    (b"+7", 1, 8),
    (b"0x10", 1, 1),
    (b"-0", 1, 1),
    (b"007", 0, 7),
    (b"1\x002", 1, 2),       # stoll reads a C string: stops at the NUL
    (b"9223372036854775807", 1, INT64_MIN),
    (b"-9223372036854775808", -1, INT64_MAX),
    (b"-9223372036854775808", 0, INT64_MIN),
    (b"100", INT64_MIN, INT64_MIN + 100),
]


@pytest.mark.parametrize("before,delta,result", ADD_CASES,
                         ids=[repr(c[0]) + f"{c[1]:+d}" for c in ADD_CASES])
def test_add(v2, before, delta, result):
    if before is not None:
        v2.set("n", before)
    assert v2.add("n", delta) == result
    # the stored value is the decimal text of the result
    assert v2.get("n") == str(result).encode()


def test_add_wraps_at_int64_max(v2):
    assert v2.add("w", INT64_MAX) == INT64_MAX
    assert v2.add("w", 1) == INT64_MIN
    assert v2.get("w") == b"-9223372036854775808"


ADD_ERRORS = [b"", b"abc", b"\x00", b" ", b"-", b"+", b"x1",
              b"9223372036854775808", b"-9223372036854775809",
              b"99999999999999999999999"]


@pytest.mark.parametrize("before", ADD_ERRORS, ids=repr)
@pytest.mark.parametrize("dialect", ["v1", "v2"])
def test_add_unparsable_closes_and_keeps_value(store, stack, other, before,
                                               dialect):
    client = stack.enter_context(store.client(dialect))
    other.set("bad", before)
    other.sync()
    client.send_request("ADD", s(b"/bad"), i64(1))
    assert client.wait_closed() == b"", "no reply before the close"
    assert other.get("bad") == before
    assert_alive(other)


# ---- COMPARE_SET (section 5) ----

def test_compare_set_missing_key_nonempty_expected_creates_nothing(v2):
    before = v2.num_keys()
    assert v2.compare_set("cs", b"x", b"y") == b"x"
    assert v2.num_keys() == before
    assert v2.check(["cs"]) is False


def test_compare_set_missing_key_empty_expected_creates(v2):
    before = v2.num_keys()
    assert v2.compare_set("cs", b"", b"y\x00z") == b"y\x00z"
    assert v2.num_keys() == before + 1
    assert v2.get("cs") == b"y\x00z"


def test_compare_set_match_replaces(v2):
    v2.set("cs", b"old")
    assert v2.compare_set("cs", b"old", b"new") == b"new"
    assert v2.get("cs") == b"new"


def test_compare_set_mismatch_returns_current(v2):
    v2.set("cs", b"cur")
    assert v2.compare_set("cs", b"other", b"new") == b"cur"
    assert v2.compare_set("cs", b"cu", b"new") == b"cur"    # byte-exact
    assert v2.compare_set("cs", b"cur\x00", b"new") == b"cur"
    assert v2.compare_set("cs", b"", b"new") == b"cur"
    assert v2.get("cs") == b"cur"


def test_compare_set_existing_empty_matches_empty(v2):
    v2.set("cs", b"")
    assert v2.compare_set("cs", b"", b"filled") == b"filled"
    assert v2.get("cs") == b"filled"


def test_compare_set_to_empty(v2):
    v2.set("cs", b"a")
    assert v2.compare_set("cs", b"a", b"") == b""
    assert v2.check(["cs"]) is True
    assert v2.get("cs") == b""


def test_compare_set_wakes_waiters_even_when_it_lies(v2, other):
    """Sections 5 and 8: the newer (libuv) server wakes the waiters of a
    COMPARE_SET's key on every path, including the "lie" (key missing,
    `expected` not empty) that answers `expected` and creates nothing. The
    waiter gets one STOP_WAITING byte; the key stays missing, so its GET
    then reads an empty value (libuv's answer for a missing key)."""
    v2.send_wait(["cw"])
    assert_alive(v2)  # a PING behind the WAIT: it is in before `other` writes
    assert other.compare_set("cw", b"x", b"y") == b"x"
    assert v2.recv_u8() == STOP_WAITING
    v2.assert_silent()
    assert other.check(["cw"]) is False       # nothing was created
    assert v2.get_only("cw") == b""
    # a wait on two keys: the lie counts for one of them
    v2.send_wait(["cw", "cw2"])
    assert_alive(v2)
    assert other.compare_set("cw2", b"x", b"y") == b"x"
    v2.assert_silent()
    assert other.compare_set("cw", b"", b"made") == b"made"
    assert v2.recv_u8() == STOP_WAITING
    # the registration was used up: a later write sends nothing more
    other.set("cw2", b"late")
    v2.assert_silent()
    assert_alive(v2)
    assert_alive(other)


def test_compare_set_lie_wakes_only_its_own_key(v2, other):
    v2.send_wait(["cw3"])
    assert_alive(v2)
    assert other.compare_set("cw3-other", b"x", b"y") == b"x"
    other.set("cw3-another", b"")
    v2.assert_silent()
    assert other.compare_set("cw3", b"x", b"y") == b"x"
    assert v2.recv_u8() == STOP_WAITING
    assert_alive(other)


# ---- CHECK, GETNUMKEYS, DELETE_KEY ----

def test_check(v2):
    v2.set("a", b"1")
    v2.set("e", b"")
    assert v2.check(["a"]) is True
    assert v2.check(["a", "e"]) is True
    assert v2.check(["a", "missing"]) is False
    assert v2.check([]) is True
    assert v2.check(["a", "a"]) is True
    v2.send_request("CHECK", keylist([b"/a", b"/missing"]))
    assert v2.recv_exact(1) == u8(NOT_READY)
    v2.send_request("CHECK", keylist([b"/a"]))
    assert v2.recv_exact(1) == u8(READY)
    # "a" is not "/a"
    v2.send_request("CHECK", keylist([b"a"]))
    assert v2.recv_exact(1) == u8(NOT_READY)


def test_getnumkeys_and_delete(v2, store, stack):
    assert v2.num_keys() == 0
    v2.set("a", b"1")
    v2.set("a", b"2")
    v2.set("b", b"")
    assert v2.add("c", 3) == 3
    with store.client("v2", raw_keys=True) as raw_keys:
        raw_keys.add("init/", 1)
    assert v2.num_keys() == 4
    v2.send_request("GETNUMKEYS")
    assert v2.recv_exact(8) == i64(4)
    v2.send_request("DELETE_KEY", s(b"/a"))
    assert v2.recv_exact(8) == i64(1)
    v2.send_request("DELETE_KEY", s(b"/a"))
    assert v2.recv_exact(8) == i64(0)
    assert v2.num_keys() == 3
    assert v2.check(["a"]) is False


def test_delete_does_not_touch_waiters(v2, other):
    v2.send_wait(["d"])
    assert other.delete_key("d") == 0
    other.set("d", b"1")
    assert v2.recv_u8() == STOP_WAITING
    # a waiter on a key that is deleted and re-set is released by the set
    assert other.delete_key("d") == 1
    v2.send_wait(["d"])
    v2.assert_silent()
    other.set("d", b"2")
    assert v2.recv_u8() == STOP_WAITING


# ---- APPEND, MULTI_GET, MULTI_SET ----

def test_append(v2):
    v2.append("ap", b"ab")
    v2.assert_silent()
    v2.append("ap", b"\x00c")
    v2.append("ap", b"")
    v2.assert_silent()
    assert v2.get("ap") == b"ab\x00c"
    v2.append("ap-empty", b"")
    assert v2.check(["ap-empty"]) is True
    assert v2.get("ap-empty") == b""


def test_multi_set_multi_get(v2):
    v2.multi_set(["m1", "m2", "m3"], [b"a", b"", b"\x00\x01"])
    v2.assert_silent()
    v2.send_request("MULTI_GET", keylist([b"/m1", b"/m2", b"/m3", b"/m1"]))
    expected = s(b"a") + s(b"") + s(b"\x00\x01") + s(b"a")
    assert v2.recv_exact(len(expected)) == expected   # no count prefix
    v2.assert_silent()
    assert v2.multi_get([]) == []
    v2.multi_set([], [])
    v2.multi_set(["m1", "m1"], [b"first", b"second"])   # in order
    assert v2.get("m1") == b"second"


def test_multi_get_missing_key_is_empty(v2):
    """muster follows libuv here (section 5: legacy closes instead)."""
    v2.set("have", b"x")
    assert v2.multi_get(["have", "nope"], wait=False) == [b"x", b""]
    assert_alive(v2)


def test_get_missing_key(store, stack):
    """v2: an empty value (libuv); v1: the connection closes (1.13)."""
    c2 = stack.enter_context(store.client("v2"))
    assert c2.get_only("nope") == b""
    assert_alive(c2)
    assert c2.check(["nope"]) is False
    c1 = stack.enter_context(store.client("v1"))
    c1.send_request("GET", s(b"/nope"))
    assert c1.wait_closed() == b""
    assert_alive(c2)


# ---- WAIT and wake-ups (section 6) ----

WRITERS = {
    "set": lambda c, key: c.set(key, b"v"),
    "add": lambda c, key: c.add(key, 1),
    "append": lambda c, key: c.append(key, b"v"),
    "multi_set": lambda c, key: c.multi_set(["unrelated", key], [b"", b"v"]),
    "compare_set": lambda c, key: c.compare_set(key, b"", b"v"),
}


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_wait_released_by(v2, other, writer):
    v2.send_wait(["w"])
    v2.assert_silent(0.2)
    WRITERS[writer](other, "w")
    assert v2.recv_exact(1) == u8(STOP_WAITING)
    v2.assert_silent(0.2)
    assert_alive(v2)


def test_wait_on_present_keys_answers_at_once(v2):
    v2.set("p", b"")
    v2.send_request("WAIT", keylist([b"/p", b"/p"]))
    assert v2.recv_exact(1) == u8(STOP_WAITING)
    v2.send_request("WAIT", keylist([]))
    assert v2.recv_exact(1) == u8(STOP_WAITING)


def test_wait_for_several_keys(v2, other):
    other.set("k1", b"1")
    v2.send_wait(["k1", "k2", "k3"])
    other.set("k2", b"2")
    v2.assert_silent(0.2)
    other.set("k2", b"again")           # the same key twice is one key
    v2.assert_silent(0.2)
    other.multi_set(["k3"], [b"3"])
    assert v2.recv_exact(1) == u8(STOP_WAITING)
    v2.assert_silent(0.2)


def test_wait_duplicate_missing_key(v2, other):
    v2.send_wait(["dup", "dup"])
    other.set("dup", b"")
    assert v2.recv_exact(1) == u8(STOP_WAITING)
    v2.assert_silent(0.2)


def test_many_waiters_released_by_one_set(store, stack, other):
    waiters = [stack.enter_context(store.client(d))
               for d in ("v1", "v2") * 5]
    for w in waiters:
        w.send_wait(["many"])
    assert_alive(other)
    for w in waiters:
        w.assert_silent(0.05)
    other.set("many", b"go")
    for w in waiters:
        assert w.recv_exact(1) == u8(STOP_WAITING)
        assert w.get_only("many") == b"go"


def test_second_wait_replaces_the_first(v2, other):
    v2.send_wait(["first"])
    v2.send_wait(["second"])
    assert_alive(v2)       # PING behind the two WAITs: both were processed
    other.set("first", b"")
    v2.assert_silent()
    other.set("second", b"")
    assert v2.recv_exact(1) == u8(STOP_WAITING)
    v2.assert_silent()


def test_waits_of_a_closed_connection_are_dropped(store, stack, other):
    gone = store.client("v2")
    gone.send_wait(["gone"])
    assert_alive(gone)
    gone.close()
    time.sleep(0.1)
    other.set("gone", b"x")             # pushes to nobody; must not hurt
    assert_alive(other)
    assert other.get("gone") == b"x"


# ---- CANCEL_WAIT (section 6) ----

def test_cancel_wait(v2, other):
    v2.send_wait(["c"])
    v2.assert_silent(0.2)
    v2.send_request("CANCEL_WAIT")
    assert v2.recv_exact(1) == u8(WAIT_CANCELED)
    other.set("c", b"")                  # no stale STOP_WAITING afterwards
    v2.assert_silent()
    assert_alive(v2)


def test_cancel_wait_without_a_wait(v2):
    v2.send_request("CANCEL_WAIT")
    assert v2.recv_exact(1) == u8(WAIT_CANCELED)
    v2.send_request("CANCEL_WAIT")
    assert v2.recv_exact(1) == u8(WAIT_CANCELED)
    assert_alive(v2)


def test_cancel_wait_after_release_is_raced(v2, other):
    """The key was set just before CANCEL_WAIT: STOP_WAITING is already on
    its way, so the answer is STOP_WAITING then WAIT_CANCELED."""
    v2.send_wait(["r"])
    other.set("r", b"")
    assert v2.readable(5.0), "STOP_WAITING never came"
    v2.send_request("CANCEL_WAIT")
    assert v2.recv_exact(2) == u8(STOP_WAITING) + u8(WAIT_CANCELED)
    v2.assert_silent()


def test_cancel_wait_race_either_order(v2, other):
    for i in range(50):
        v2.send_wait([f"race{i}"])
        other.set(f"race{i}", b"")
        v2.send_request("CANCEL_WAIT")
        first = v2.recv_u8()
        if first == STOP_WAITING:
            assert v2.recv_u8() == WAIT_CANCELED
        else:
            assert first == WAIT_CANCELED
        assert_alive(v2, i)


def test_client_wait_timeout(v2, other):
    with pytest.raises(WaitTimeout) as info:
        v2.wait(["late"], timeout=0.2)
    assert info.value.cancel_reply == u8(WAIT_CANCELED)
    other.set("late", b"1")
    v2.assert_silent()
    assert v2.get("late") == b"1"


# ---- queues and LIST (libuv, section 5) ----

def test_queue_push_pop_len(v2):
    assert v2.queue_len("q") == 0
    v2.queue_push("q", b"a")
    v2.assert_silent()
    v2.queue_push("q", b"")
    v2.queue_push("q", b"c\x00")
    assert v2.queue_len("q") == 3
    v2.send_request("QUEUE_POP", s(b"/q"))
    assert v2.recv_exact(8 + 9) == i64(3) + s(b"a")
    assert v2.queue_pop("q") == (2, b"")
    assert v2.queue_pop("q") == (1, b"c\x00")
    v2.send_request("QUEUE_POP", s(b"/q"))
    assert v2.recv_exact(8) == i64(0)
    v2.assert_silent()
    assert v2.queue_len("q") == 0
    assert v2.queue_pop("unknown") == (0, None)


def test_queues_are_not_keys(v2):
    v2.queue_push("q", b"x")
    assert v2.num_keys() == 0
    assert v2.list_keys() == []
    v2.set("q", b"key")
    assert v2.queue_len("q") == 1
    assert v2.get("q") == b"key"
    assert v2.queue_pop("q") == (1, b"x")


def test_blocking_pop_wakes_one_waiter(store, stack, other):
    """A blocking pop is WAIT then QUEUE_POP; a push releases one
    waiter; CHECK/WAIT see a non-empty queue as existing (libuv)."""
    a = stack.enter_context(store.client("v2"))
    b_ = stack.enter_context(store.client("v2"))
    assert other.check(["bq"]) is False
    a.send_wait(["bq"])
    b_.send_wait(["bq"])
    assert_alive(a)
    assert_alive(b_)
    other.queue_push("bq", b"one")
    assert select.select([a.sock, b_.sock], [], [], 5.0)[0], "nobody woke"
    time.sleep(0.2)                       # a second wake-up would be here
    released = [c for c in (a, b_) if c.readable(0)]
    assert len(released) == 1, "exactly one waiter is released"
    first = released[0]
    second = b_ if first is a else a
    assert first.recv_u8() == STOP_WAITING
    assert first.queue_pop("bq") == (1, b"one")
    second.assert_silent(0.1)
    other.queue_push("bq", b"two")
    assert other.check(["bq"]) is True
    assert second.recv_u8() == STOP_WAITING
    assert second.queue_pop("bq") == (1, b"two")
    second.send_wait(["bq"])
    second.assert_silent(0.2)
    second.cancel_wait()


def test_list(v2, store):
    assert v2.list_keys() == []
    v2.set("a", b"1")
    v2.set("b\x00c", b"")
    with store.client("v2", raw_keys=True) as raw_keys:
        assert raw_keys.add("init/", 1) == 1
    v2.send_request("LIST")
    n = v2.recv_i64()
    assert n == 3
    keys = {v2.recv_bytes() for _ in range(n)}
    assert keys == {b"/a", b"/b\x00c", b"init/"}
    v2.assert_silent()


# ---- no reply, pipelining, fragmentation (sections 9, 11, 14) ----

NO_REPLY = {
    "SET": v2req("SET", s(b"/nr"), s(b"v")),
    "APPEND": v2req("APPEND", s(b"/nr"), s(b"w")),
    "MULTI_SET": v2req("MULTI_SET", u64(2), s(b"/nr1"), s(b"a"), s(b"/nr2"),
                       s(b"")),
    "QUEUE_PUSH": v2req("QUEUE_PUSH", s(b"/nrq"), s(b"x")),
    "VALIDATE": v2req("VALIDATE", u32(0x3C85F7CE)),
}


@pytest.mark.parametrize("op", sorted(NO_REPLY))
def test_no_reply(v2, op):
    v2.send(NO_REPLY[op])
    v2.assert_silent()
    assert_alive(v2)


PIPELINE = [
    # (request bytes, exact reply bytes)
    (hello(7), u32(7)),
    (v2req("SET", s(b"/p"), s(b"x\x00")), b""),
    (v2req("ADD", s(b"/n"), i64(2)), i64(2)),
    (v2req("WAIT", keylist([b"/p", b"/n"])), u8(STOP_WAITING)),
    (v2req("GET", s(b"/p")), s(b"x\x00")),
    (v2req("CHECK", keylist([b"/p", b"/n"])), u8(READY)),
    (v2req("APPEND", s(b"/p"), s(b"y")), b""),
    (v2req("COMPARE_SET", s(b"/p"), s(b"x\x00y"), s(b"z")), s(b"z")),
    (v2req("MULTI_SET", u64(1), s(b"/q"), s(b"Q")), b""),
    (v2req("MULTI_GET", keylist([b"/p", b"/q"])), s(b"z") + s(b"Q")),
    (v2req("GETNUMKEYS"), i64(3)),
    (v2req("PING", u32(9)), u32(9)),
    (v2req("QUEUE_PUSH", s(b"/qq"), s(b"1")), b""),
    (v2req("QUEUE_LEN", s(b"/qq")), i64(1)),
    (v2req("QUEUE_POP", s(b"/qq")), i64(1) + s(b"1")),
    (v2req("DELETE_KEY", s(b"/p")), i64(1)),
    (v2req("CHECK", keylist([b"/p"])), u8(NOT_READY)),
    (v2req("CANCEL_WAIT"), u8(WAIT_CANCELED)),
    (v2req("GETNUMKEYS"), i64(2)),
]
PIPELINE_OUT = b"".join(reply for _, reply in PIPELINE)
PIPELINE_IN = b"".join(req for req, _ in PIPELINE)


def test_pipelined_requests_in_one_send(store, stack):
    raw = stack.enter_context(store.raw())
    raw.send(PIPELINE_IN)
    assert raw.recv_exact(len(PIPELINE_OUT)) == PIPELINE_OUT
    raw.assert_silent()


def test_requests_split_byte_by_byte(store, stack):
    raw = stack.enter_context(store.raw())
    raw.send_bytewise(PIPELINE_IN, pause=0.0005)
    assert raw.recv_exact(len(PIPELINE_OUT)) == PIPELINE_OUT
    raw.assert_silent()


def test_v1_requests_split_byte_by_byte(store, stack):
    stream = (v1req("SET", s(b"/b"), s(b"\x00\xce\xf7\x85\x3c")) +
              v1req("ADD", s(b"/c"), i64(-3)) +
              v1req("WAIT", keylist([b"/b"])) +
              v1req("GET", s(b"/b")) +
              v1req("GETNUMKEYS"))
    reply = i64(-3) + u8(STOP_WAITING) + s(b"\x00\xce\xf7\x85\x3c") + i64(2)
    raw = stack.enter_context(store.raw())
    raw.send_bytewise(stream, pause=0.0005)
    assert raw.recv_exact(len(reply)) == reply
    raw.assert_silent()


def test_pipelined_replies_during_a_wait_keep_order(v2, other):
    """A pending WAIT does not hold back later replies; the STOP_WAITING
    byte lands between whole replies."""
    v2.send(v2req("WAIT", keylist([b"/later"])) + v2req("PING", u32(5)))
    assert v2.recv_exact(4) == u32(5)
    big = bytes(range(256)) * 4096            # 1 MiB
    other.set("big", big)
    other.sync()
    v2.send(v2req("GET", s(b"/big")))
    other.set("later", b"")
    got = v2.recv_exact(8 + len(big) + 1)
    assert got in (s(big) + u8(STOP_WAITING), u8(STOP_WAITING) + s(big))


# ---- v1 raw: WATCH_KEY (section 5) and one key space (section 10) ----

def test_v1_watch_key_events(store, stack):
    watcher = stack.enter_context(store.client("v1"))
    writer = stack.enter_context(store.client("v1"))
    watcher.send_request("WATCH_KEY", s(b"/w"))
    assert watcher.recv_exact(1) == u8(KEY_CALLBACK_REGISTERED)

    writer.set("w", b"1")
    assert watcher.recv_event() == (KEY_CREATED, b"/w", b"", b"1")
    writer.set("w", b"2")
    assert watcher.recv_event() == (KEY_UPDATED, b"/w", b"1", b"2")
    assert writer.add("w", 5) == 7
    assert watcher.recv_event() == (KEY_UPDATED, b"/w", b"2", b"7")
    assert writer.compare_set("w", b"nope", b"x") == b"7"   # failed: silent
    watcher.assert_silent(0.2)
    assert writer.compare_set("w", b"7", b"8") == b"8"
    assert watcher.recv_event() == (KEY_UPDATED, b"/w", b"7", b"8")
    writer.set("other", b"x")                              # other key: silent
    watcher.assert_silent(0.2)
    assert writer.delete_key("w") == 1
    assert watcher.recv_event() == (KEY_DELETED, b"/w", b"8", b"")
    assert writer.add("w", 1) == 1                         # ADD creating
    kind, key, old, new = watcher.recv_event()
    assert (key, old, new) == (b"/w", b"", b"1")
    assert kind == KEY_CREATED
    watcher.assert_silent(0.2)


def test_v1_watch_event_exact_bytes(store, stack):
    watcher = stack.enter_context(store.client("v1"))
    writer = stack.enter_context(store.client("v2"))
    assert watcher.watch_key("x") == KEY_CALLBACK_REGISTERED
    writer.set("x", b"\x00")
    event = u8(KEY_CREATED) + s(b"/x") + s(b"") + s(b"\x00")
    assert watcher.recv_exact(len(event)) == event
    # the watcher connection still serves ordinary requests
    assert watcher.num_keys() == 1
    writer.set("x", b"y")
    event = u8(KEY_UPDATED) + s(b"/x") + s(b"\x00") + s(b"y")
    assert watcher.recv_exact(len(event)) == event


def test_v1_and_v2_share_keys(store, stack):
    c1 = stack.enter_context(store.client("v1"))
    c2 = stack.enter_context(store.client("v2"))
    c1.set("shared", b"from v1")
    assert c2.get("shared") == b"from v1"
    c2.set("shared", b"from v2")
    assert c1.get("shared") == b"from v2"
    assert c1.add("ctr", 1) == 1
    assert c2.add("ctr", 1) == 2
    assert c1.num_keys() == c2.num_keys() == 2
    # each releases the other's WAIT
    c1.send_wait(["x1"])
    c2.send_wait(["x2"])
    c2.append("x1", b"")
    assert c1.recv_exact(1) == u8(STOP_WAITING)
    c1.set("x2", b"")
    assert c2.recv_exact(1) == u8(STOP_WAITING)
    assert c2.delete_key("shared") == 1
    assert c1.delete_key("shared") == 0
    assert c1.check(["x1", "x2", "ctr"]) is True


def test_concurrent_v1_and_v2_adds(store):
    """Interleaved clients of both dialects; the counter is exact."""
    errors = []

    def work(dialect):
        try:
            with store.client(dialect) as c:
                for _ in range(300):
                    c.add("total", 1)
        except Exception as exc:   # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(d,))
               for d in ("v1", "v2") * 3]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "clients hung"
    assert not errors, errors
    with store.client("v1") as c:
        assert c.add("total", 0) == 1800


def test_v2_prefix_split_before_detection(store, stack):
    """The five detection bytes may arrive apart (section 10)."""
    raw = stack.enter_context(store.raw())
    for piece in (b"\x00", b"\xce\xf7", b"\x85", b"\x3c", b"\x0d" + u32(3)):
        raw.send(piece)
        time.sleep(0.02)
    assert raw.recv_exact(4) == u32(3)


def test_v1_set_starting_like_v2_prefix_is_v1(store, stack):
    """`00 CE` ... that is not the whole magic: a v1 SET whose key length
    is small; detection must not wait for bytes that never come."""
    raw = stack.enter_context(store.raw())
    key = b"/" + b"k" * 0xCD       # length 0xCE
    raw.send(v1req("SET", s(key), s(b"v")))
    raw.send(v1req("GETNUMKEYS"))
    assert raw.recv_exact(8) == i64(1)



# ---- the default listening address (section 1) ----

def _ipv6_loopback_or_fail():
    """Tests below need ::1; fail (never skip) with the reason if absent."""
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
    except OSError as exc:
        pytest.fail(f"IPv6 loopback ::1 is unavailable on this machine "
                    f"({exc}); the dual-stack test needs it", pytrace=False)


def test_default_host_is_dual_stack(muster_store, stack):
    """`muster store` without --host listens on "::" with IPV6_V6ONLY off,
    so one port serves 127.0.0.1 and ::1 clients, of both dialects, with
    one key space and wake-ups across the two families."""
    _ipv6_loopback_or_fail()
    st = muster_store(host=None)
    assert f"Bind to :::{st.port}" in st.log_text()
    v4 = {d: stack.enter_context(Client(st.port, d, "127.0.0.1"))
          for d in ("v1", "v2")}
    v6 = {d: stack.enter_context(Client(st.port, d, "::1"))
          for d in ("v1", "v2")}
    for family, conns in (("v4", v4), ("v6", v6)):
        for dialect, c in conns.items():
            assert c.sock.family == (socket.AF_INET if family == "v4"
                                     else socket.AF_INET6)
            c.set(f"{family}-{dialect}", f"from {family} {dialect}".encode())
    for conns in (v4, v6):
        for c in conns.values():
            for family in ("v4", "v6"):
                for dialect in ("v1", "v2"):
                    assert (c.get(f"{family}-{dialect}", timeout=5.0)
                            == f"from {family} {dialect}".encode())
    # a ::1 waiter released by a 127.0.0.1 writer, and the other way round
    v6["v2"].send_wait(["cross"])
    v4["v1"].send_wait(["cross"])
    v4["v2"].set("cross", b"x")
    assert v6["v2"].recv_u8() == STOP_WAITING
    assert v4["v1"].recv_u8() == STOP_WAITING
    assert v6["v1"].num_keys() == 5
    # the log names each peer by the address it dialled from
    st.wait_log(r"\[::1\]:\d+ speaks v2", timeout=5.0)
    st.wait_log(r"127\.0\.0\.1:\d+ speaks v1", timeout=5.0)
