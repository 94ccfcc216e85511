#!/usr/bin/env python3
"""A web application's cache traffic, through redis-py, once over RESP2 and once over RESP3.

Proves that an unmodified redis-py client works against the server: its connection handshake
(HELLO, CLIENT SETNAME, CLIENT SETINFO, SELECT), session keys with TTLs, a page cache filled with
SET NX, user profiles in hashes, page-view counters, a pipeline of 100 commands, a MULTI/EXEC
pipeline, a WATCH-based optimistic update (including a lost race), pub/sub with a subscriber
thread (channels and patterns), DEL, EXPIRE, a SCAN walk, and redis-py's Lock (acquire, extend,
reacquire and release run its own Lua scripts through EVALSHA, falling back to EVAL), and a GCRA
rate limiter: go-redis/redis_rate's `allowN` script, pinned unchanged in
e2e/fixtures/lua/redis_rate_allow_n.lua, run through redis-py's register_script (EVALSHA, SCRIPT
LOAD on NOSCRIPT). Every reply is compared with the
exact value Redis gives; the first mismatch fails that protocol's run with a message saying
which step, what was expected and what came back.

Usage: web_workload.py [HOST [PORT]]   (default: $KEYMESH_HOST or 127.0.0.1, $KEYMESH_PORT or 6379)
Prints one line per protocol and a summary, `web_workload: 2 passed, 0 failed`; exits 1 on any
failure. Keys live under a random prefix and are deleted afterwards; nothing is flushed.
"""

import logging
import os
import queue
import sys
import threading
import time
import traceback
import uuid

import redis

# redis-py 5 logs every RESP3 push message of a PubSub at INFO on this logger.
logging.getLogger("push_response").setLevel(logging.WARNING)


class Mismatch(AssertionError):
    pass


class Checker:
    def __init__(self, proto):
        self.proto = proto
        self.count = 0

    def eq(self, what, actual, expected):
        self.count += 1
        if actual != expected or type(actual) is not type(expected):
            raise Mismatch(
                f"[protocol {self.proto}] {what}: expected {expected!r} "
                f"({type(expected).__name__}), got {actual!r} ({type(actual).__name__})"
            )

    def true(self, what, cond, detail):
        self.count += 1
        if not cond:
            raise Mismatch(f"[protocol {self.proto}] {what}: {detail}")

    def raises(self, what, fn, exc_type, prefix):
        self.count += 1
        try:
            result = fn()
        except exc_type as e:
            if not str(e).startswith(prefix):
                raise Mismatch(
                    f"[protocol {self.proto}] {what}: expected {exc_type.__name__} "
                    f"starting with {prefix!r}, got {str(e)!r}"
                ) from e
            return
        raise Mismatch(
            f"[protocol {self.proto}] {what}: expected {exc_type.__name__} "
            f"starting with {prefix!r}, got reply {result!r}"
        )


def connect(host, port, proto, **kw):
    return redis.Redis(
        host=host,
        port=port,
        protocol=proto,
        decode_responses=True,
        socket_timeout=10,
        socket_connect_timeout=5,
        **kw,
    )


def handshake(c, host, port, proto, p):
    """redis-py's on_connect: HELLO (RESP3 only), CLIENT SETNAME, CLIENT SETINFO, SELECT."""
    app = connect(host, port, proto, client_name="web-frontend-1")
    c.eq("PING", app.ping(), True)
    c.eq("ECHO", app.echo("hello"), "hello")
    c.eq("CLIENT GETNAME after client_name=", app.client_getname(), "web-frontend-1")
    # redis-py's client_info() converts id, age, idle, db, sub, psub, multi, qbuf, qbuf-free,
    # obl, argv-mem, oll, omem and tot-mem to int and raises KeyError if one is missing.
    info = app.client_info()
    c.eq("CLIENT INFO name", info.get("name"), "web-frontend-1")
    c.eq("CLIENT INFO db", info.get("db"), 0)
    # CLIENT INFO has resp= since Redis 7.0; lib-name= since 7.2 (redis-py's CLIENT SETINFO).
    c.eq("CLIENT INFO resp", info.get("resp"), str(proto))
    if "lib-name" in info:
        c.eq("CLIENT INFO lib-name (CLIENT SETINFO)", info["lib-name"], "redis-py")
        c.eq("CLIENT INFO lib-ver (CLIENT SETINFO)", info.get("lib-ver"), redis.__version__)
    # With protocol=3 redis-py's on_connect already sent HELLO 3 and raised ConnectionError
    # unless the reply's proto was 3. HELLO again, explicitly: a map in RESP3, a flat array in
    # RESP2 (redis-py leaves the RESP2 one unparsed).
    hello = app.execute_command("HELLO", str(proto))
    if proto == 3:
        c.true("HELLO 3 reply type", isinstance(hello, dict), f"expected a map, got {hello!r}")
    else:
        c.true("HELLO 2 reply type", isinstance(hello, list) and len(hello) % 2 == 0,
               f"expected a flat key/value array, got {hello!r}")
        hello = dict(zip(hello[::2], hello[1::2]))
    c.eq("HELLO proto", hello.get("proto"), proto)
    c.true("HELLO id", isinstance(hello.get("id"), int), f"got {hello.get('id')!r}")
    # A second database through redis-py's db= (SELECT in the handshake).
    app_db3 = connect(host, port, proto, db=3)
    k = p + "db-probe"
    c.eq("SET in db 3", app_db3.set(k, "three"), True)
    c.eq("CLIENT INFO db (db=3)", app_db3.client_info().get("db"), 3)
    c.eq("GET in db 0 of a db-3 key", app.get(k), None)
    c.eq("GET in db 3", app_db3.get(k), "three")
    c.eq("DEL in db 3", app_db3.delete(k), 1)
    app_db3.close()
    app.close()


def sessions(r, c, p):
    sid = p + "session:" + uuid.uuid4().hex
    payload = '{"user_id": 42, "csrf": "8f14e45f", "cart": [1, 2, 3]}'
    c.eq("SET session EX 1800", r.set(sid, payload, ex=1800), True)
    c.eq("GET session", r.get(sid), payload)
    ttl = r.ttl(sid)
    c.true("TTL session", isinstance(ttl, int) and 1799 <= ttl <= 1800, f"got {ttl!r}")
    pttl = r.pttl(sid)
    c.true("PTTL session", isinstance(pttl, int) and 1_799_000 < pttl <= 1_800_000, f"got {pttl!r}")
    # Sliding expiration on each request.
    c.eq("EXPIRE session 3600", r.expire(sid, 3600), True)
    ttl = r.ttl(sid)
    c.true("TTL after EXPIRE", 3599 <= ttl <= 3600, f"got {ttl!r}")
    c.eq("TTL of a missing key", r.ttl(p + "session:missing"), -2)
    c.eq("EXPIRE of a missing key", r.expire(p + "session:missing", 10), False)
    # A short-lived token really expires.
    tok = p + "csrf-token"
    c.eq("SET PX 100", r.set(tok, "t0k", px=100), True)
    time.sleep(0.3)
    c.eq("GET after PX expiry", r.get(tok), None)
    c.eq("EXISTS after PX expiry", r.exists(tok), 0)
    # SETEX and GETEX, as session stores use them.
    c.eq("SETEX", r.setex(sid + ":flash", 60, "saved!"), True)
    c.eq("GETDEL flash", r.getdel(sid + ":flash"), "saved!")
    c.eq("GET after GETDEL", r.get(sid + ":flash"), None)
    c.eq("PERSIST session", r.persist(sid), True)
    c.eq("TTL after PERSIST", r.ttl(sid), -1)
    c.eq("DEL session (logout)", r.delete(sid), 1)
    c.eq("GET after logout", r.get(sid), None)
    c.eq("DEL again", r.delete(sid), 0)


def page_cache(r, c, p):
    key = p + "page:/products/42"
    html = "<html><body>" + "x" * 4000 + "</body></html>"
    c.eq("SET NX EX on miss", r.set(key, html, nx=True, ex=300), True)
    c.eq("SET NX on hit", r.set(key, "other", nx=True, ex=300), None)
    c.eq("GET cached page", r.get(key), html)
    c.eq("SET XX refresh", r.set(key, html + "v2", xx=True, keepttl=True), True)
    ttl = r.ttl(key)
    c.true("TTL kept by KEEPTTL", 299 <= ttl <= 300, f"got {ttl!r}")
    c.eq("SET XX on missing", r.set(p + "page:/nope", "x", xx=True), None)
    c.eq("SET GET", r.set(key, "v3", get=True), html + "v2")
    c.eq("MSET fragments", r.mset({p + "frag:header": "<h1>", p + "frag:footer": "</f>"}), True)
    c.eq("MGET fragments", r.mget([p + "frag:header", p + "frag:missing", p + "frag:footer"]),
         ["<h1>", None, "</f>"])
    c.eq("STRLEN", r.strlen(key), 2)
    c.eq("APPEND", r.append(key, "-x"), 4)
    c.eq("GET after APPEND", r.get(key), "v3-x")


def profiles(r, c, p):
    key = p + "user:42"
    profile = {"name": "Ada Lovelace", "email": "ada@example.com", "plan": "pro", "logins": "0"}
    c.eq("HSET profile", r.hset(key, mapping=profile), 4)
    c.eq("HGETALL profile", r.hgetall(key), profile)
    c.eq("HGET name", r.hget(key, "name"), "Ada Lovelace")
    c.eq("HMGET", r.hmget(key, ["email", "missing", "plan"]), ["ada@example.com", None, "pro"])
    c.eq("HINCRBY logins", r.hincrby(key, "logins", 1), 1)
    c.eq("HSET update one field", r.hset(key, "plan", "enterprise"), 0)
    c.eq("HDEL", r.hdel(key, "email", "nope"), 1)
    c.eq("HEXISTS", r.hexists(key, "email"), False)
    c.eq("HLEN", r.hlen(key), 3)
    c.eq("HGETALL after edits", r.hgetall(key),
         {"name": "Ada Lovelace", "plan": "enterprise", "logins": "1"})
    c.eq("HGETALL missing", r.hgetall(p + "user:0"), {})
    c.raises("GET on a hash", lambda: r.get(key), redis.ResponseError, "WRONGTYPE")


def counters(r, c, p):
    key = p + "views:/products/42"
    for i in range(1, 11):
        c.eq(f"INCR #{i}", r.incr(key), i)
    c.eq("INCRBY 5", r.incrby(key, 5), 15)
    c.eq("DECR", r.decr(key), 14)
    c.eq("GET counter", r.get(key), "14")
    c.eq("INCRBYFLOAT", r.incrbyfloat(p + "revenue", "10.5"), 10.5)
    c.eq("INCRBYFLOAT again", r.incrbyfloat(p + "revenue", "0.25"), 10.75)
    r.set(p + "not-a-number", "abc")
    c.raises("INCR on text", lambda: r.incr(p + "not-a-number"), redis.ResponseError,
             "value is not an integer or out of range")


def pipelines(r, c, p):
    # 100 commands in one round trip, no transaction: a batch page render.
    pipe = r.pipeline(transaction=False)
    for i in range(50):
        pipe.set(f"{p}batch:{i}", f"value-{i}")
    for i in range(50):
        pipe.get(f"{p}batch:{i}")
    res = pipe.execute()
    c.eq("pipeline length", len(res), 100)
    c.eq("pipeline SET replies", res[:50], [True] * 50)
    c.eq("pipeline GET replies", res[50:], [f"value-{i}" for i in range(50)])
    # Errors in a non-transactional pipeline come back in place.
    pipe = r.pipeline(transaction=False)
    pipe.set(p + "pe:s", "1").hset(p + "pe:h", "f", "v").incr(p + "pe:h").get(p + "pe:s")
    res = pipe.execute(raise_on_error=False)
    c.eq("pipeline with error: SET", res[0], True)
    c.eq("pipeline with error: HSET", res[1], 1)
    c.true("pipeline with error: INCR on hash",
           isinstance(res[2], redis.ResponseError) and str(res[2]).startswith("WRONGTYPE"),
           f"expected a WRONGTYPE error, got {res[2]!r}")
    c.eq("pipeline with error: GET", res[3], "1")
    # MULTI/EXEC: checkout moves the cart into an order atomically.
    cart, order = p + "cart:42", p + "order:1001"
    r.hset(cart, mapping={"sku-1": "2", "sku-7": "1"})
    pipe = r.pipeline(transaction=True)
    pipe.hgetall(cart)
    pipe.hset(order, mapping={"sku-1": "2", "sku-7": "1", "status": "paid"})
    pipe.delete(cart)
    pipe.incr(p + "orders:count")
    pipe.expire(order, 86400)
    res = pipe.execute()
    c.eq("MULTI/EXEC replies", res, [{"sku-1": "2", "sku-7": "1"}, 3, 1, 1, True])
    c.eq("cart gone after EXEC", r.exists(cart), 0)
    c.eq("order after EXEC", r.hgetall(order), {"sku-1": "2", "sku-7": "1", "status": "paid"})
    # A command that fails at run time inside EXEC does not roll back the others.
    pipe = r.pipeline(transaction=True)
    pipe.set(p + "tx:a", "1").incr(p + "pe:h").set(p + "tx:b", "2")
    res = pipe.execute(raise_on_error=False)
    c.eq("EXEC with runtime error: first", res[0], True)
    c.true("EXEC with runtime error: second",
           isinstance(res[1], redis.ResponseError) and str(res[1]).startswith("WRONGTYPE"),
           f"expected a WRONGTYPE error, got {res[1]!r}")
    c.eq("EXEC with runtime error: third", res[2], True)
    c.eq("EXEC with runtime error: effects kept", r.mget([p + "tx:a", p + "tx:b"]), ["1", "2"])


def optimistic_update(r, other, c, p):
    """WATCH/MULTI/EXEC: an inventory decrement that loses one race, then retries."""
    key = p + "stock:sku-1"
    r.set(key, "10")
    with r.pipeline() as pipe:
        pipe.watch(key)
        current = int(pipe.get(key))
        c.eq("read under WATCH", current, 10)
        other.decrby(key, 3)  # another web worker sells 3 first
        pipe.multi()
        pipe.set(key, current - 1)
        c.raises("EXEC after a concurrent write", pipe.execute, redis.WatchError, "")
    attempts = 0

    def decrement(pipe):
        nonlocal attempts
        attempts += 1
        stock = int(pipe.get(key))
        pipe.multi()
        pipe.set(key, stock - 1)

    res = r.transaction(decrement, key)
    c.eq("transaction() result", res, [True])
    c.eq("transaction() attempts", attempts, 1)
    c.eq("stock after both sales", r.get(key), "6")
    # UNWATCH: an untouched WATCH lets EXEC through.
    with r.pipeline() as pipe:
        pipe.watch(key)
        pipe.unwatch()
        other.incr(key)
        pipe.multi()
        pipe.incr(key)
        c.eq("EXEC after UNWATCH", pipe.execute(), [8])


def locks(r, other, c, p):
    """redis-py's Lock, unchanged: a job lock held by one worker, refused to another, extended,
    reacquired, released, and a lock that expired and passed on before its holder was done."""
    from redis.exceptions import LockNotOwnedError

    name = p + "lock:nightly-report"
    mine = r.lock(name, timeout=5, blocking_timeout=0.2)
    theirs = other.lock(name, timeout=5, blocking_timeout=0.2)
    c.eq("acquire a free lock", mine.acquire(), True)
    c.eq("owned() after acquire", mine.owned(), True)
    c.eq("another worker is refused", theirs.acquire(), False)
    c.eq("locked() for the other worker", theirs.locked(), True)
    c.eq("extend by 10 s (Lua)", mine.extend(10), True)
    c.true("TTL after extend", 14_000 < r.pttl(name) <= 15_000, f"pttl {r.pttl(name)}")
    c.eq("extend, replacing the TTL (Lua)", mine.extend(3, replace_ttl=True), True)
    c.true("TTL after replace_ttl", 2_000 < r.pttl(name) <= 3_000, f"pttl {r.pttl(name)}")
    c.eq("reacquire (Lua)", mine.reacquire(), True)
    c.true("TTL after reacquire", 4_000 < r.pttl(name) <= 5_000, f"pttl {r.pttl(name)}")
    c.eq("the holder still holds it", mine.owned(), True)
    mine.release()
    c.eq("released lock is gone", r.exists(name), 0)
    with other.lock(name, timeout=5, blocking_timeout=0.2) as held:
        c.eq("the other worker takes it (context manager)", held.owned(), True)
        c.eq("and the first is refused now", r.lock(name, blocking_timeout=0.1).acquire(), False)
    c.eq("released on leaving the block", r.exists(name), 0)
    # A holder too slow for its lock: it expires, another worker takes it, and the first
    # worker's extend and release scripts find someone else's token and refuse.
    short = r.lock(name, timeout=0.1)
    c.eq("acquire a 100 ms lock", short.acquire(), True)
    time.sleep(0.3)
    taker = other.lock(name, timeout=5, blocking_timeout=0.2)
    c.eq("another worker takes the expired lock", taker.acquire(), True)
    c.raises("extend after the lock passed on (Lua)", lambda: short.extend(1), LockNotOwnedError, "")
    c.raises("release after the lock passed on (Lua)", short.release, LockNotOwnedError, "")
    c.eq("the new holder still holds it", taker.owned(), True)
    taker.release()
    c.eq("released by the new holder", r.exists(name), 0)


GCRA_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "lua", "redis_rate_allow_n.lua")


def rate_limiter(r, c, p):
    """go-redis/redis_rate's GCRA limiter (its Lua script, unchanged): a burst of 5 at 5 per
    2 seconds is let through, the 6th request is refused with the time to wait, and after that
    wait one more goes through. The script reads TIME and writes with SET EX: effects
    replication (never re-running the script) is what makes that safe on a mesh."""
    with open(GCRA_SCRIPT) as f:
        allow_n = r.register_script(f.read())
    key = p + "rate:login:203.0.113.9"
    burst, rate, period = 5, 5, 2  # one request per 0.4 s, 5 at once

    def allow():
        allowed, remaining, retry_after, reset_after = allow_n(keys=[key], args=[burst, rate, period, 1])
        return allowed, remaining, float(retry_after), float(reset_after)

    r.script_flush()  # the first call finds no script: redis-py loads it and retries
    results = [allow() for _ in range(burst)]
    c.eq("a burst of 5 is allowed", [a for a, _, _, _ in results], [1] * burst)
    # remaining = 4 - k plus the time elapsed, truncated to an integer as Redis converts a Lua
    # number; the first can come out as 3.9999999 (the script's float arithmetic near 3e8 s).
    left = [x for _, x, _, _ in results]
    c.true("remaining counts down", left[0] in (3, 4) and left[1:] == [3, 2, 1, 0], f"remaining {left}")
    c.eq("the script is cached (SCRIPT EXISTS)", r.script_exists(allow_n.sha), [True])
    c.true("the limiter's key expires (SET EX ceil(reset_after))", 0 < r.ttl(key) <= 2, f"ttl {r.ttl(key)}")
    allowed, remaining, retry_after, reset_after = allow()
    c.eq("the 6th request is refused", (allowed, remaining), (0, 0))
    c.true("retry after at most one emission interval", 0 < retry_after <= 0.4, f"retry_after {retry_after}")
    c.true("reset after at most the burst", 1.6 < reset_after <= 2.0, f"reset_after {reset_after}")
    time.sleep(retry_after + 0.02)
    c.eq("allowed again after waiting retry_after", allow()[0], 1)


def pubsub(r, host, port, proto, c, p):
    """Cache invalidation fan-out: a subscriber thread, a publisher on another connection."""
    sub_client = connect(host, port, proto)
    ps = sub_client.pubsub()
    chan, pattern = p + "invalidate", p + "news.*"
    ps.subscribe(chan)
    ps.psubscribe(pattern)
    confirmations = []
    deadline = time.time() + 5
    while len(confirmations) < 2 and time.time() < deadline:
        m = ps.get_message(timeout=1.0)
        if m is not None:
            confirmations.append(m)
    c.eq("subscribe confirmations", confirmations, [
        {"type": "subscribe", "pattern": None, "channel": chan, "data": 1},
        {"type": "psubscribe", "pattern": None, "channel": pattern, "data": 2},
    ])

    received = queue.Queue()
    stop = threading.Event()

    def listen():
        while not stop.is_set():
            m = ps.get_message(timeout=0.2)
            if m is not None:
                received.put(m)

    t = threading.Thread(target=listen, name="subscriber", daemon=True)
    t.start()
    try:
        c.eq("PUBSUB NUMSUB", r.pubsub_numsub(chan), [(chan, 1)])
        c.true("PUBSUB CHANNELS", chan in r.pubsub_channels(p + "*"),
               f"{chan!r} not in {r.pubsub_channels(p + '*')!r}")
        for i in range(5):
            c.eq(f"PUBLISH #{i} to channel", r.publish(chan, f"page:/products/{i}"), 1)
        c.eq("PUBLISH to pattern", r.publish(p + "news.sport", "goal"), 1)
        c.eq("PUBLISH to nobody", r.publish(p + "nobody", "x"), 0)
        got = []
        deadline = time.time() + 5
        while len(got) < 6 and time.time() < deadline:
            try:
                got.append(received.get(timeout=0.5))
            except queue.Empty:
                pass
        expected = [{"type": "message", "pattern": None, "channel": chan,
                     "data": f"page:/products/{i}"} for i in range(5)]
        expected.append({"type": "pmessage", "pattern": pattern,
                         "channel": p + "news.sport", "data": "goal"})
        c.eq("messages received by the subscriber thread", got, expected)
    finally:
        stop.set()
        t.join(5)
    c.true("subscriber thread stopped", not t.is_alive(), "thread did not stop")
    ps.unsubscribe(chan)
    ps.punsubscribe(pattern)
    confirmations = []
    deadline = time.time() + 5
    while len(confirmations) < 2 and time.time() < deadline:
        m = ps.get_message(timeout=1.0)
        if m is not None:
            confirmations.append(m)
    c.eq("unsubscribe confirmations", confirmations, [
        {"type": "unsubscribe", "pattern": None, "channel": chan, "data": 1},
        {"type": "punsubscribe", "pattern": None, "channel": pattern, "data": 0},
    ])
    c.eq("PUBLISH after unsubscribe", r.publish(chan, "late"), 0)
    ps.close()
    sub_client.close()


def scan_walk(r, c, p):
    """SCAN the keyspace for one tenant's keys, as a cache purge job does."""
    tenant = p + "tenant:7:"
    pipe = r.pipeline(transaction=False)
    for i in range(300):
        pipe.set(f"{tenant}{i}", i)
    pipe.execute()
    expected = {f"{tenant}{i}" for i in range(300)}
    seen = set(r.scan_iter(match=tenant + "*", count=50))
    c.eq("SCAN MATCH finds every tenant key", seen, expected)
    # The raw cursor loop ends on cursor 0.
    cursor, rounds, raw = 0, 0, set()
    while True:
        cursor, keys = r.scan(cursor=cursor, match=tenant + "*", count=100)
        raw.update(keys)
        rounds += 1
        if cursor == 0 or rounds > 10_000:
            break
    c.eq("SCAN cursor loop ends at 0", cursor, 0)
    c.eq("SCAN cursor loop keys", raw, expected)
    typed = set(r.scan_iter(match=p + "*", count=1000, _type="hash"))
    c.true("SCAN TYPE hash", typed and all(r.type(k) == "hash" for k in typed),
           f"got {sorted(typed)!r}")
    # Purge in batches.
    deleted = 0
    batch = []
    for k in r.scan_iter(match=tenant + "*", count=100):
        batch.append(k)
        if len(batch) == 100:
            deleted += r.delete(*batch)
            batch = []
    if batch:
        deleted += r.delete(*batch)
    c.eq("DEL of scanned keys", deleted, 300)
    c.eq("SCAN after purge", list(r.scan_iter(match=tenant + "*")), [])


def run(host, port, proto):
    c = Checker(proto)
    p = f"webwl:{proto}:{uuid.uuid4().hex[:8]}:"
    r = connect(host, port, proto)
    other = connect(host, port, proto)
    steps = [
        ("handshake", lambda: handshake(c, host, port, proto, p)),
        ("sessions", lambda: sessions(r, c, p)),
        ("page cache", lambda: page_cache(r, c, p)),
        ("profiles", lambda: profiles(r, c, p)),
        ("counters", lambda: counters(r, c, p)),
        ("pipelines", lambda: pipelines(r, c, p)),
        ("optimistic update", lambda: optimistic_update(r, other, c, p)),
        ("pub/sub", lambda: pubsub(r, host, port, proto, c, p)),
        ("locks", lambda: locks(r, other, c, p)),
        ("rate limiter", lambda: rate_limiter(r, c, p)),
        ("scan", lambda: scan_walk(r, c, p)),
    ]
    try:
        for name, step in steps:
            try:
                step()
            except Mismatch:
                raise
            except Exception as e:  # noqa: BLE001 - name the step and line, then fail
                ours = [f for f in traceback.extract_tb(e.__traceback__) if f.filename == __file__]
                where = f" at line {ours[-1].lineno}: {ours[-1].line}" if ours else ""
                raise Mismatch(f"[protocol {proto}] step {name}{where}: "
                               f"{type(e).__name__}: {e}") from e
    finally:
        try:
            leftovers = list(r.scan_iter(match=p + "*", count=1000))
            if leftovers:
                r.delete(*leftovers)
        except redis.RedisError:
            pass
        r.close()
        other.close()
    return c.count


def main():
    args = sys.argv[1:]
    host = args[0] if args else os.environ.get("KEYMESH_HOST", "127.0.0.1")
    port = int(args[1] if len(args) > 1 else os.environ.get("KEYMESH_PORT", "6379"))
    passed = failed = 0
    for proto in (2, 3):
        started = time.monotonic()
        try:
            checks = run(host, port, proto)
        except Exception as e:  # noqa: BLE001 - any error fails this protocol's run, loudly
            failed += 1
            print(f"web_workload: protocol {proto}: FAILED: {e}", flush=True)
            if not isinstance(e, Mismatch):
                traceback.print_exc()
            sys.stderr.flush()
        else:
            passed += 1
            print(f"web_workload: protocol {proto}: ok, {checks} checks "
                  f"in {time.monotonic() - started:.2f}s")
    print(f"web_workload: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
