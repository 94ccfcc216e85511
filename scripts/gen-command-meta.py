#!/usr/bin/env python3
"""Generates engine/src/cmd/meta/redis-7.0-commands.json from Redis 7.0's own command
definitions (src/commands/*.json in the Redis sources that scripts/install-deps.sh unpacks),
so that COMMAND INFO, COMMAND DOCS, COMMAND LIST and COMMAND GETKEYS[ANDFLAGS] answer with
Redis's metadata: flags, ACL categories, tips, key specs, arguments, history.

What Redis computes when it builds its command table is computed here, ported from Redis 7.0's
server.c: the implicit ACL categories (setImplicitACLCategories), the legacy first/last/step
range and the `movablekeys` flag (populateCommandLegacyRangeSpec), the reply order of flags
(addReplyFlagsForCommand) and categories (acl.c's ACLCommandCategories). The engine only
renders what it finds here, for the commands it implements (engine/src/cmd/meta.rs).

Commands a later Redis added that KeyMesh runs, and that clients send to any Redis (CLIENT
SETINFO, Redis 7.2: redis-py, go-redis and Lettuce send it on connect), are described in
LATER_COMMANDS below, copied from that Redis's src/commands/*.json.

  scripts/gen-command-meta.py            # rewrite the file
  scripts/gen-command-meta.py --check    # exit 1 if the file differs from what it would write
  scripts/gen-command-meta.py --help     # print this help

Environment: REDIS_SRC (default /var/cache/keymesh/redis-src).
"""

import glob
import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(REPO, "engine", "src", "cmd", "meta", "redis-7.0-commands.json")
SRC = os.environ.get("REDIS_SRC", "/var/cache/keymesh/redis-src")

# addReplyFlagsForCommand's order; the flags Redis hides (may_replicate, sentinel, only_sentinel,
# protected, touches_arbitrary_keys) are left out as it leaves them out.
FLAG_ORDER = ["WRITE", "READONLY", "DENYOOM", "MODULE", "ADMIN", "PUBSUB", "NOSCRIPT", "BLOCKING",
              "LOADING", "STALE", "SKIP_MONITOR", "SKIP_SLOWLOG", "ASKING", "FAST", "NO_AUTH",
              "NO_MANDATORY_KEYS", "NO_ASYNC_LOADING", "NO_MULTI", "MOVABLE_KEYS", "ALLOW_BUSY"]
# acl.c's ACLCommandCategories order.
ACL_ORDER = ["KEYSPACE", "READ", "WRITE", "SET", "SORTEDSET", "LIST", "HASH", "STRING", "BITMAP",
             "HYPERLOGLOG", "GEO", "STREAM", "PUBSUB", "ADMIN", "FAST", "SLOW", "BLOCKING",
             "DANGEROUS", "CONNECTION", "TRANSACTION", "SCRIPTING"]
KEY_FLAG_ORDER = ["RO", "RW", "OW", "RM", "ACCESS", "UPDATE", "INSERT", "DELETE", "NOT_KEY",
                  "INCOMPLETE", "VARIABLE_FLAGS"]


# Commands of a later Redis that KeyMesh runs, as that Redis's src/commands/*.json defines them
# (Redis 7.2.0's client-setinfo.json; the flag SENTINEL is one Redis hides from COMMAND).
LATER_COMMANDS = {
    "SETINFO": {
        "summary": "Sets information specific to the client or connection.",
        "complexity": "O(1)",
        "group": "connection",
        "since": "7.2.0",
        "arity": 4,
        "container": "CLIENT",
        "function": "clientSetinfoCommand",
        "command_flags": ["NOSCRIPT", "LOADING", "STALE", "SENTINEL"],
        "acl_categories": ["CONNECTION"],
        "arguments": [
            {"name": "attr", "type": "oneof", "arguments": [
                {"token": "lib-name", "name": "libname", "type": "string"},
                {"token": "lib-ver", "name": "libver", "type": "string"},
            ]},
        ],
    },
}


def key_spec(spec):
    bs, fk = spec["begin_search"], spec["find_keys"]
    if bs.get("index"):
        begin = {"type": "index", "index": bs["index"]["pos"]}
    elif bs.get("keyword"):
        begin = {"type": "keyword", "keyword": bs["keyword"]["keyword"], "startfrom": bs["keyword"]["startfrom"]}
    else:
        begin = {"type": "unknown"}
    if fk.get("range"):
        r = fk["range"]
        find = {"type": "range", "lastkey": r["lastkey"], "keystep": r["step"], "limit": r["limit"]}
    elif fk.get("keynum"):
        k = fk["keynum"]
        find = {"type": "keynum", "keynumidx": k["keynumidx"], "firstkey": k["firstkey"], "keystep": k["step"]}
    else:
        find = {"type": "unknown"}
    out = {"flags": [f.lower() if f not in ("RO", "RW", "OW", "RM") else f
                     for f in KEY_FLAG_ORDER if f in spec.get("flags", [])],
           "begin_search": begin, "find_keys": find}
    if "notes" in spec:
        out["notes"] = spec["notes"]
    return out


def legacy_range(specs):
    """populateCommandLegacyRangeSpec: (first, last, step, movable)."""
    if not specs:
        return 0, 0, 0, False
    def plain(s):
        return s["begin_search"]["type"] == "index" and s["find_keys"]["type"] == "range"
    if len(specs) == 1 and plain(specs[0]):
        s = specs[0]
        first, last = s["begin_search"]["index"], s["find_keys"]["lastkey"]
        return first, (last + first if last >= 0 else last), s["find_keys"]["keystep"], "incomplete" in s["flags"]
    movable = False
    first, last, prev_last = None, 0, 0
    for s in specs:
        if not plain(s):
            movable = True
            continue
        pos = s["begin_search"]["index"]
        if s["find_keys"]["keystep"] != 1 or (prev_last and prev_last != pos - 1):
            movable = True
            continue
        if "incomplete" in s["flags"]:
            movable = True
        first = pos if first is None else min(first, pos)
        abs_last = s["find_keys"]["lastkey"]
        if abs_last >= 0:
            abs_last += pos
        # Redis compares as unsigned: a negative lastkey is the largest.
        last = max(last, abs_last, key=lambda v: v % (1 << 32))
        prev_last = last
    if first is None:
        return 0, 0, 0, True
    rel = last if last < 0 else last - first
    return first, (rel + first if rel >= 0 else rel), 1, movable


def argument(arg):
    out = {"name": arg["name"].lower(), "type": arg["type"]}
    if "key_spec_index" in arg:
        out["key_spec_index"] = arg["key_spec_index"]
    if "token" in arg:
        out["token"] = arg["token"].upper()
    for field in ("summary", "since", "deprecated_since"):
        if field in arg:
            out[field] = arg[field]
    flags = [f for f in ("optional", "multiple", "multiple_token") if arg.get(f)]
    if flags:
        out["flags"] = flags
    if arg["type"] in ("oneof", "block"):
        out["arguments"] = [argument(a) for a in arg.get("arguments", [])]
    return out


def command(name, desc):
    container = desc.get("container")
    fullname = f"{container.lower()}|{name.lower()}" if container else name.lower()
    flags = set(desc.get("command_flags", []))
    specs = [key_spec(s) for s in desc.get("key_specs", [])]
    first, last, step, movable = legacy_range(specs)
    if movable:
        flags.add("MOVABLE_KEYS")
    acl = set(desc.get("acl_categories", []))
    # setImplicitACLCategories
    if "WRITE" in flags:
        acl.add("WRITE")
    if "READONLY" in flags and "SCRIPTING" not in acl:
        acl.add("READ")
    if "ADMIN" in flags:
        acl |= {"ADMIN", "DANGEROUS"}
    if "PUBSUB" in flags:
        acl.add("PUBSUB")
    if "FAST" in flags:
        acl.add("FAST")
    if "BLOCKING" in flags:
        acl.add("BLOCKING")
    if "FAST" not in acl:
        acl.add("SLOW")
    out = {
        "name": fullname,
        "arity": desc["arity"],
        "flags": [f.lower().replace("movable_keys", "movablekeys") for f in FLAG_ORDER if f in flags],
        "first_key": first, "last_key": last, "key_step": step,
        "acl_categories": ["@" + c.lower() for c in ACL_ORDER if c in acl],
        "tips": [t.lower() for t in desc.get("command_tips", [])],
        "key_specs": specs,
        "summary": desc.get("summary"),
        "since": desc.get("since"),
        "group": desc["group"].replace("_", "-"),  # COMMAND_GROUP_STR: "sorted-set"
    }
    for field in ("complexity", "deprecated_since", "replaced_by"):
        if field in desc:
            out[field] = desc[field]
    if desc.get("doc_flags"):
        out["doc_flags"] = [f.lower() for f in ("DEPRECATED", "SYSCMD") if f in desc["doc_flags"]]
    if desc.get("history"):
        out["history"] = [list(h) for h in desc["history"]]
    if desc.get("arguments"):
        out["arguments"] = [argument(a) for a in desc["arguments"]]
    if desc.get("get_keys_function"):
        out["get_keys_function"] = desc["get_keys_function"]
    return out


def generate():
    files = sorted(glob.glob(os.path.join(SRC, "src", "commands", "*.json")))
    if not files:
        sys.exit(f"gen-command-meta: no command definitions under {SRC}/src/commands (run scripts/install-deps.sh)")
    commands = []
    for path in files:
        with open(path) as f:
            for name, desc in json.load(f).items():
                commands.append(command(name, desc))
    names = {c["name"] for c in commands}
    for name, desc in LATER_COMMANDS.items():
        later = command(name, desc)
        if later["name"] not in names:
            commands.append(later)
    commands.sort(key=lambda c: c["name"])
    doc = {"generated": "by scripts/gen-command-meta.py from Redis 7.0.15's src/commands/*.json (and CLIENT SETINFO from Redis 7.2.0's); do not edit",
           "commands": commands}
    return json.dumps(doc, indent=None, separators=(",", ":"), sort_keys=False) + "\n"


def main():
    args = sys.argv[1:]
    if args in (["--help"], ["-h"]):
        print(__doc__.strip())
        return 0
    if args not in ([], ["--check"]):
        print(f"gen-command-meta: unknown arguments {' '.join(args)}\n\n{__doc__.strip()}", file=sys.stderr)
        return 2
    text = generate()
    if args == ["--check"]:
        with open(OUT) as f:
            if f.read() != text:
                print(f"gen-command-meta: {OUT} is out of date: run scripts/gen-command-meta.py", file=sys.stderr)
                return 1
        print("gen-command-meta: up to date")
        return 0
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        f.write(text)
    print(f"gen-command-meta: wrote {OUT} ({len(text)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
