# SPDX-License-Identifier: MIT
"""What one tracker peer can fill is bounded (issue 12, finding 6).

Three connections PUTting 10,000 distinct keys each used to fill the
tracker's 10,000-key table, so no new device could register and no new key
could be requested; a real `muster server --key newdev` then reconnected in
a loop, logging "Registered" each time while absent from the queue list.

Now each connection holds at most --max-keys-per-conn keys (and
--max-per-conn free devices and waiting requests); a PUT or REQUEST past a
limit is answered with TVM's FAIL code (-1 for PUT, [-1, why] for REQUEST),
changes nothing and keeps the connection; and `muster server` reports a
refused registration and offers again with backoff on the same connection.
Peers are the spec's TVM client (tvmpeer) and the real `muster server`.
"""

import time

import pytest

import tvmpeer
from conftest import HOST


def put_frames(keys, port=9090):
    """PUT frames for every key, ready to send in one go (pipelined)."""
    return b"".join(tvmpeer.frame(tvmpeer.encode_json(
        [tvmpeer.PUT, k, [port, k + ":0.5"], None])) for k in keys)


def flood(session, prefix, count):
    """PUT `count` distinct keys on one connection, pipelined; return the
    replies in order."""
    session.sock.sendall(put_frames(f"{prefix}{i}" for i in range(count)))
    return [session.recv() for _ in range(count)]


def queue_info(tracker):
    with tracker.session() as s:
        return s.summary()["queue_info"]


def test_three_flooders_leave_room_for_a_new_device(muster_tracker,
                                                     muster_server):
    tracker = muster_tracker()
    flooders = [tracker.session(timeout=60) for _ in range(3)]
    try:
        for n, sess in enumerate(flooders):
            replies = flood(sess, f"f{n}-", 10000)
            # the first 64 keys are taken, every later one refused
            assert replies[:64] == [0] * 64
            assert replies[64:] == [-1] * (10000 - 64)
            assert sess.ping() == 0  # refused, not disconnected
        assert len(queue_info(tracker)) == 3 * 64
        # a real device registers at once, and a TVM client gets it
        server = muster_server(tracker=tracker, key="newdev")
        info = queue_info(tracker)
        assert info["newdev"] == {"free": 1, "pending": 0}
        sock, _, grant = tvmpeer.request_session(HOST, tracker.port, "newdev")
        with sock:
            assert grant[2] == server.matchkey
            sock.sendall(b"reached")
            assert tvmpeer.recvall(sock, 7) == b"reached"
        assert "refused" not in server.log_text()
    finally:
        for sess in flooders:
            sess.close()
    # a refusal is logged on a peer's 1st, 2nd, 4th ... refusal: 14 lines
    # for 9,936 refusals, per flooder
    lines = tracker.log_count(r"PUT of key f\d-\d+ refused: this connection "
                              r"already holds on 64 device keys "
                              r"\(--max-keys-per-conn\)")
    assert lines == 3 * 14, lines


def test_refused_registration_is_seen_and_retried(muster_tracker,
                                                  muster_server):
    """The key table is full of someone else's devices: the server says
    it was refused, backs off on the same connection (no reconnect loop,
    no "Registered"), and registers as soon as there is room."""
    tracker = muster_tracker("--max-keys", 2)
    filler = tracker.session()
    try:
        assert filler.put("a", 1, "a:1") == 0
        assert filler.put("b", 1, "b:1") == 0
        server = muster_server(tracker=tracker, key="newdev",
                               wait_offer=False)
        server.wait_log(r"refused to register key newdev")
        time.sleep(2.5)
        log = server.log_text()
        refusals = log.count("refused to register key newdev")
        # backoff 0.25, 0.5, 1, 2 s: a handful, not a tight loop
        assert 2 <= refusals <= 6, log
        assert "Registered with" not in log
        assert "Lost tracker" not in log
        assert "Offering matchkey" not in log
        assert "newdev" not in queue_info(tracker)
        tracker.wait_log(r"PUT of key newdev refused: the tracker already "
                         r"has 2 device keys in use \(--max-keys\)")
    finally:
        filler.close()  # its two keys empty out: room for newdev
    server.wait_log(r"Tracker .* took key newdev after \d+ refusals",
                    timeout=15)
    server.wait_log(r"Registered with tracker")
    server.wait_offers(1)
    assert queue_info(tracker)["newdev"] == {"free": 1, "pending": 0}
    # one connection all along
    assert server.log_count("Tracker .* unreachable|Lost tracker") == 0


def test_refused_request_is_an_answer(muster_tracker):
    """Past --max-keys-per-conn a REQUEST gets [-1, why]: TVM's
    TrackerSession.request raises RuntimeError on it ("Invalid return
    value"), and the connection stays usable."""
    tracker = muster_tracker("--max-keys-per-conn", 1)
    with tracker.session() as s:
        s.send_request("a")  # waits: no device of key a
        with pytest.raises(RuntimeError, match=r"-1, .*--max-keys-per-conn"):
            s.request("b", timeout=5)
        assert s.ping() == 0
        # the same key again is fine: still one key
        s.send_request("a")
        assert queue_info(tracker)["a"]["pending"] == 2
        assert "b" not in queue_info(tracker)


def test_refused_put_past_max_per_conn(muster_tracker):
    tracker = muster_tracker("--max-per-conn", 2)
    with tracker.session() as s:
        assert s.put("k", 1, "k:1") == 0
        assert s.put("k", 1, "k:2") == 0
        assert s.put("k", 1, "k:3") == -1
        assert s.pending_matchkeys() == ["k:1", "k:2"]
        assert queue_info(tracker)["k"] == {"free": 2, "pending": 0}
    tracker.wait_log(r"PUT of key k refused: this connection already offers "
                     r"2 free devices \(--max-per-conn\) \(1 refused so far\)")
