#!/usr/bin/env bash
# Drives a server with the stock redis-cli as an operator or a shell script would, and compares
# every output with what redis-cli prints against Redis: one-shot commands in raw and --no-raw
# formatting, error replies and -e, -n (SELECT), -x (value from stdin), -r/-i (repeat), --csv,
# commands read from stdin (including MULTI/EXEC), --pipe with a few thousand generated commands
# (and one bad one), --scan --pattern (and the `--scan | xargs DEL` idiom), --bigkeys, and RESP3
# with -3 (HELLO 3 at connect, maps and doubles).
#
#   e2e/clients/redis_cli_workload.sh [HOST [PORT]]   (default $KEYMESH_HOST/$KEYMESH_PORT, 127.0.0.1:6379)
#
# Uses database $REDIS_CLI_WORKLOAD_DB (default 11), which it FLUSHDBs first and last: point it
# at a test server only. Prints each failed check with expected and actual output, then
# `redis_cli_workload: N passed, N failed`; exits 1 if any check failed.
set -uo pipefail
export LC_ALL=C

host="${1:-${KEYMESH_HOST:-127.0.0.1}}"
port="${2:-${KEYMESH_PORT:-6379}}"
db="${REDIS_CLI_WORKLOAD_DB:-11}"
passed=0
failed=0

cli() { redis-cli -h "$host" -p "$port" -n "$db" "$@"; }
cli_help="$(redis-cli --help 2>&1)"

# check NAME EXPECTED ACTUAL: exact comparison of two strings (command output, exit codes).
check() {
  if [[ "$2" == "$3" ]]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "redis_cli_workload: FAIL: $1"
    echo "  expected: $(printf '%q' "$2")"
    echo "  actual:   $(printf '%q' "$3")"
  fi
}

if [[ "$(redis-cli -h "$host" -p "$port" ping 2>&1)" != PONG ]]; then
  echo "redis_cli_workload: no server answering PING at $host:$port" >&2
  exit 1
fi
check "FLUSHDB (start)" "OK" "$(cli flushdb)"

# --- one-shot commands, raw output (stdout is not a tty) -------------------------------------
check "PING" "PONG" "$(cli ping)"
check "ECHO" "hello world" "$(cli echo 'hello world')"
check "SET" "OK" "$(cli set greeting 'hello world')"
check "GET" "hello world" "$(cli get greeting)"
check "GET missing (raw prints an empty line)" "" "$(cli get missing)"
check "SET EX" "OK" "$(cli set session:1 token ex 120)"
ttl="$(cli ttl session:1)"
[[ "$ttl" == 120 || "$ttl" == 119 ]] && ttl=ok
check "TTL after SET EX 120" "ok" "$ttl"
check "SET NX on existing" "" "$(cli set greeting other nx)"
check "INCR" "1" "$(cli incr hits)"
check "INCRBY" "11" "$(cli incrby hits 10)"
check "HSET" "3" "$(cli hset user:1 name ada plan pro logins 0)"
# Field order of HGETALL is unspecified (Redis happens to keep insertion order for small
# hashes): the checks compare sorted field/value pairs.
check "HGETALL (raw: field, value, one per line)" $'logins\t0\nname\tada\nplan\tpro' \
  "$(cli hgetall user:1 | paste - - | sort)"
check "RPUSH" "3" "$(cli rpush queue a 'b c' 'd"e')"
check "LRANGE" $'a\nb c\nd"e' "$(cli lrange queue 0 -1)"
check "SADD" "3" "$(cli sadd tags red green blue)"
check "SMEMBERS (sorted)" $'blue\ngreen\nred' "$(cli smembers tags | sort)"
check "ZADD" "3" "$(cli zadd board 10 alice 20 bob 15 carol)"
check "ZRANGE WITHSCORES" $'alice\n10\ncarol\n15\nbob\n20' "$(cli zrange board 0 -1 withscores)"
check "ZINCRBY" "12.5" "$(cli zincrby board 2.5 alice)"
check "TYPE" $'string\nhash\nlist\nset\nzset' \
  "$(for k in greeting user:1 queue tags board; do cli type "$k"; done)"
check "EXISTS" "3" "$(cli exists greeting user:1 nope queue)"

# --- --no-raw formatting (what an interactive user sees) --------------------------------------
check "--no-raw GET of a counter" '"11"' "$(cli --no-raw get hits)"
check "--no-raw INCR" "(integer) 12" "$(cli --no-raw incr hits)"
check "--no-raw nil" "(nil)" "$(cli --no-raw get missing)"
check "--no-raw bulk" '"hello world"' "$(cli --no-raw get greeting)"
check "--no-raw array" $'1) "a"\n2) "b c"\n3) "d\\"e"' "$(cli --no-raw lrange queue 0 -1)"
check "--no-raw empty array" "(empty array)" "$(cli --no-raw lrange nolist 0 -1)"
check "--no-raw status" "OK" "$(cli --no-raw set k2 v2)"
check "--no-raw error" "(error) WRONGTYPE Operation against a key holding the wrong kind of value" \
  "$(cli --no-raw incr user:1)"

# --- errors and exit codes ------------------------------------------------------------------
check "error reply text" "WRONGTYPE Operation against a key holding the wrong kind of value" \
  "$(cli incr user:1 | head -1)"
check "wrong arity" "ERR wrong number of arguments for 'get' command" "$(cli get | head -1)"
check "not an integer" "ERR value is not an integer or out of range" "$(cli incrby hits ten | head -1)"
if grep -q -- '^  -e ' <<<"$cli_help"; then
  cli -e incr user:1 >/dev/null 2>&1
  check "-e: exit status 1 on an error reply" "1" "$?"
  cli -e incr hits >/dev/null 2>&1
  check "-e: exit status 0 on success" "0" "$?"
else
  echo "redis_cli_workload: this redis-cli has no -e; skipping its checks"
fi

# --- -n, -x, -r/-i, --csv ---------------------------------------------------------------------
check "-n selects another database" "" "$(redis-cli -h "$host" -p "$port" -n $((db + 1)) get greeting)"
check "-x reads the last argument from stdin" "OK" "$(printf 'line one\nline two' | cli -x set fromstdin)"
check "GET of -x value" $'line one\nline two' "$(cli get fromstdin)"
check "-r 5 INCR" $'1\n2\n3\n4\n5' "$(cli -r 5 incr repeated)"
check "-r 3 -i 0.05 PING" $'PONG\nPONG\nPONG' "$(cli -r 3 -i 0.05 ping)"
check "--csv LRANGE" '"a","b c","d\"e"' "$(cli --csv lrange queue 0 -1)"
check "--csv HGETALL" $'"logins","0"\n"name","ada"\n"plan","pro"' \
  "$(cli --csv hgetall user:1 | tr ',' '\n' | paste -d, - - | sort)"

# --- commands on stdin, one per line (a shell script's heredoc) -------------------------------
out="$(printf 'SET a 1\nINCR a\nGET a\nDEL a\nGET a\n' | cli)"
check "stdin commands (GET of a deleted key prints an empty line)" $'OK\n2\n2\n1' "$out"
out="$(printf 'MULTI\nSET tx 1\nINCR tx\nEXEC\n' | cli)"
check "stdin MULTI/EXEC (raw)" $'OK\nQUEUED\nQUEUED\nOK\n2' "$out"
out="$(printf 'MULTI\nSET tx 1\nINCR tx\nEXEC\n' | cli --no-raw)"
check "stdin MULTI/EXEC (--no-raw)" $'OK\nQUEUED\nQUEUED\n1) OK\n2) (integer) 2' "$out"
out="$(printf 'WATCH w\nSET w 1\nMULTI\nINCR w\nEXEC\n' | cli)"
# The client's own write to a WATCHed key aborts its EXEC: a null reply, an empty line.
check "stdin WATCH, own write, EXEC (aborted)" $'OK\nOK\nOK\nQUEUED' "$out"
check "WATCHed key unchanged by the aborted EXEC" "1" "$(cli get w)"

# --- --pipe: mass insertion (3000 SET, 1000 HSET, 1000 INCR, 500 RPUSH = 5500 commands) ------
gen_resp() {
  python3 - "$@" <<'EOF'
import sys
out = []
def cmd(*a):
    out.append("*%d\r\n" % len(a) + "".join("$%d\r\n%s\r\n" % (len(x.encode()), x) for x in a))
for i in range(3000):
    cmd("SET", "mass:str:%d" % i, "value-%d-%s" % (i, "x" * (i % 50)))
for i in range(1000):
    cmd("HSET", "mass:hash:%d" % (i % 100), "field-%d" % i, str(i))
for i in range(1000):
    cmd("INCR", "mass:counter")
for i in range(500):
    cmd("RPUSH", "mass:list", "item-%d" % i)
if len(sys.argv) > 1 and sys.argv[1] == "bad":
    out.append("*2\r\n$3\r\nSET\r\n$3\r\nbad\r\n")
sys.stdout.write("".join(out))
EOF
}
out="$(gen_resp | cli --pipe 2>&1)"
check "--pipe exit status" "0" "$?"
check "--pipe summary" $'All data transferred. Waiting for the last reply...\nLast reply received from server.\nerrors: 0, replies: 5500' "$out"
check "after --pipe: counter" "1000" "$(cli get mass:counter)"
check "after --pipe: list length" "500" "$(cli llen mass:list)"
check "after --pipe: last list item" "item-499" "$(cli lindex mass:list -1)"
check "after --pipe: a hash" "10" "$(cli hlen mass:hash:7)"
check "after --pipe: a string" "value-2999-$(printf 'x%.0s' $(seq 49))" "$(cli get mass:str:2999)"
check "after --pipe: DBSIZE" "3000 100 1 1" \
  "$(cli --scan --pattern 'mass:str:*' | wc -l) $(cli --scan --pattern 'mass:hash:*' | wc -l) $(cli exists mass:counter) $(cli exists mass:list)"
out="$(gen_resp bad | cli --pipe 2>&1)"
check "--pipe with one bad command: exit status" "1" "$?"
check "--pipe with one bad command: summary" "errors: 1, replies: 5501" "$(echo "$out" | grep '^errors:')"
check "--pipe with one bad command: error text" "ERR wrong number of arguments for 'set' command" \
  "$(echo "$out" | grep '^ERR')"
check "after second --pipe: counter" "2000" "$(cli get mass:counter)"

# --- --scan -----------------------------------------------------------------------------------
check "--scan --pattern count" "3000" "$(cli --scan --pattern 'mass:str:*' | wc -l)"
check "--scan --pattern exact set" "$(seq 0 2999 | sed 's/^/mass:str:/' | sort)" \
  "$(cli --scan --pattern 'mass:str:*' | sort)"
check "--scan --pattern with ?" $'mass:str:10\nmass:str:11\nmass:str:12\nmass:str:13\nmass:str:14\nmass:str:15\nmass:str:16\nmass:str:17\nmass:str:18\nmass:str:19' \
  "$(cli --scan --pattern 'mass:str:1?' | sort)"
check "--scan | xargs DEL" "3000" \
  "$(cli --scan --pattern 'mass:str:*' | xargs -n 500 redis-cli -h "$host" -p "$port" -n "$db" del | awk '{ s += $1 } END { print s }')"
check "--scan after DEL" "" "$(cli --scan --pattern 'mass:str:*')"
check "DBSIZE equals the --scan count" "$(cli --scan | wc -l)" "$(cli dbsize)"

# --- --bigkeys (SCAN + TYPE + per-type length commands) ---------------------------------------
out="$(cli --bigkeys 2>&1)"
check "--bigkeys biggest list" "Biggest   list found '\"mass:list\"' has 1000 items" \
  "$(echo "$out" | grep 'Biggest   list found')"
check "--bigkeys hash count" "101 hashs with 1003 fields" \
  "$(echo "$out" | grep -o '^[0-9]* hashs with [0-9]* fields')"

# --- RESP3 (-3): HELLO 3 at connect, typed replies -------------------------------------------
if grep -q -- '^  -3 ' <<<"$cli_help"; then
  check "-3 PING" "PONG" "$(cli -3 ping)"
  check "-3 HGETALL (map, --no-raw)" $'# "logins" => "0"\n# "name" => "ada"\n# "plan" => "pro"' \
    "$(cli -3 --no-raw hgetall user:1 | sed 's/^[1-3]#/#/' | sort)"
  check "-3 HGETALL (map, raw)" $'logins 0\nname ada\nplan pro' "$(cli -3 hgetall user:1 | sort)"
  check "-3 ZSCORE (double)" "(double) 12.5" "$(cli -3 --no-raw zscore board alice)"
  check "-3 ZRANGE WITHSCORES (array of pairs)" $'1) 1) "alice"\n   2) (double) 12.5\n2) 1) "carol"\n   2) (double) 12.5\n3) 1) "bob"\n   2) (double) 20' \
    "$(cli -3 --no-raw zadd board 12.5 carol >/dev/null; cli -3 --no-raw zrange board 0 -1 withscores)"
  check "-3 SMEMBERS (set)" $'blue\ngreen\nred' "$(cli -3 smembers tags | sort)"
  check "-3 GET missing (null)" "(nil)" "$(cli -3 --no-raw get missing)"
  check "-3 HELLO proto" "3" "$(cli -3 hello 3 | sed -n '/^proto$/{n;p}; s/^proto //p')"
  check "-3 EXISTS (integer)" "(integer) 1" "$(cli -3 --no-raw exists tags)"
else
  echo "redis_cli_workload: this redis-cli has no -3 (RESP3); skipping its checks"
fi

check "FLUSHDB (end)" "OK" "$(cli flushdb)"
echo "redis_cli_workload: $passed passed, $failed failed"
((failed == 0))
