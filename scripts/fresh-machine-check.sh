#!/usr/bin/env bash
# The fresh-machine check: runs the README's main command as a newcomer
# would, `make run`, in the background on this checkout (a clean clone in
# CI), waits until /readyz answers and the demo has written its first sheet
# rows, then stops it with SIGTERM and checks that it exited cleanly (code
# 0) and said so. A missing install step fails here instead of for a
# newcomer.
#
# It uses a temporary data dir (the Makefile's DATA) and a free loopback
# port (MAILROOM_HTTP_ADDR), so it never touches ./data or a running
# mailroom. It needs bash, make, Go and curl.
#
# Environment: FRESH_READY_TIMEOUT (seconds for build + /readyz, default
# 600), FRESH_ROWS_TIMEOUT (seconds for the first sheet rows, default 120),
# FRESH_STOP_TIMEOUT (seconds for a clean exit after SIGTERM, default 30).
set -euo pipefail
cd "$(dirname "$0")/.."

ready_timeout=${FRESH_READY_TIMEOUT:-600}
rows_timeout=${FRESH_ROWS_TIMEOUT:-120}
stop_timeout=${FRESH_STOP_TIMEOUT:-30}

say() { printf 'fresh-machine: %s\n' "$*"; }
fail() {
	printf 'fresh-machine: FAILED: %s\n' "$*" >&2
	if [ -n "${log:-}" ] && [ -f "$log" ]; then
		printf -- '---- last 60 lines of the make run output (%s) ----\n' "$log" >&2
		tail -n 60 "$log" >&2
		printf -- '----\n' >&2
	fi
	exit 1
}

for tool in make go curl; do
	command -v "$tool" >/dev/null 2>&1 || fail "$tool is not installed; the README's set-up needs it"
done

# A free loopback port: nothing answers on it. Below Linux's ephemeral
# range (32768 and up by default), so no outgoing connection of the demo
# itself (to its emulator, its webhook receiver) can hold it as its source
# port by the time mailroom binds it: a CI run failed so, "bind: address
# already in use" on a port nothing listened on.
port=""
for _ in $(seq 1 50); do
	p=$((20000 + RANDOM % 12000))
	if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
		port=$p
		break
	fi
done
[ -n "$port" ] || fail "no free loopback port found"

work=$(mktemp -d "${TMPDIR:-/tmp}/mailroom-fresh.XXXXXX")
data="$work/data"
log="$work/make-run.log"
base="http://127.0.0.1:$port"
token="fresh-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
make_pid=""
mailroom_pid=""

cleanup() {
	local code=$?
	# Only what this script started, by process id.
	if [ -n "$mailroom_pid" ] && kill -0 "$mailroom_pid" 2>/dev/null; then
		kill -KILL "$mailroom_pid" 2>/dev/null || true
	fi
	if [ -n "$make_pid" ] && kill -0 "$make_pid" 2>/dev/null; then
		kill -KILL "$make_pid" 2>/dev/null || true
	fi
	if [ "$code" -eq 0 ]; then
		rm -rf "$work"
	else
		printf 'fresh-machine: kept %s for inspection\n' "$work" >&2
	fi
}
trap cleanup EXIT

# mailroom_child prints the pid of the mailroom process under pid $1 (make
# runs it through a shell, or directly).
mailroom_child() {
	local queue=("$1") p c name
	while [ ${#queue[@]} -gt 0 ]; do
		p=${queue[0]}
		queue=("${queue[@]:1}")
		for c in $(pgrep -P "$p" 2>/dev/null || ps -o pid= --ppid "$p" 2>/dev/null || true); do
			name=$(ps -o comm= -p "$c" 2>/dev/null || true)
			if [ "$(basename "$name")" = mailroom ]; then
				echo "$c"
				return 0
			fi
			queue+=("$c")
		done
	done
	return 1
}

# api GET path: prints the body of a 2xx answer, fails otherwise.
api() {
	curl -fsS --max-time 5 -H "Authorization: Bearer $token" "$base$1"
}

say "make run DATA=$data with MAILROOM_HTTP_ADDR=127.0.0.1:$port (output in $log)"
start=$SECONDS
MAILROOM_HTTP_ADDR="127.0.0.1:$port" MAILROOM_API_TOKEN="$token" make run DATA="$data" >"$log" 2>&1 &
make_pid=$!

until curl -fsS --max-time 2 -o /dev/null "$base/readyz" 2>/dev/null; do
	kill -0 "$make_pid" 2>/dev/null || fail "make run exited before /readyz answered"
	[ $((SECONDS - start)) -lt "$ready_timeout" ] || fail "/readyz did not answer within ${ready_timeout}s"
	sleep 1
done
ready_at=$((SECONDS - start))
say "/readyz answered 200 after ${ready_at}s (build included)"
mailroom_pid=$(mailroom_child "$make_pid") || fail "cannot find the mailroom process under make (pid $make_pid)"

grep -q "is running: open $base/admin" "$log" || fail "make run did not print where to open the admin page"
grep -q "generated admin password" "$log" || fail "make run did not print the generated admin password on a first start"
say "it printed the admin URL and the generated admin password"

# The demo remembers its forms in the data dir; the API says what each has
# written to its sheet.
rows=0
forms=""
until [ "$rows" -gt 0 ]; do
	kill -0 "$mailroom_pid" 2>/dev/null || fail "mailroom exited while the demo was starting"
	[ $((SECONDS - start - ready_at)) -lt "$rows_timeout" ] || fail "no sheet rows written within ${rows_timeout}s of /readyz (forms: ${forms:-none})"
	sleep 2
	[ -f "$data/demo-state.json" ] || continue
	forms=$(grep -oE '"[0-9a-f]{16}"' "$data/demo-state.json" | tr -d '"' | tr '\n' ' ' || true)
	rows=0
	for f in $forms; do
		n=$(api "/api/v1/forms/$f" 2>/dev/null | grep -oE '"rowsWritten": *[0-9]+' | grep -oE '[0-9]+$' || true)
		rows=$((rows + ${n:-0}))
	done
done
say "the demo wrote its first $rows sheet rows $((SECONDS - start - ready_at))s after /readyz (forms: $forms)"
users=$(api /api/v1/users | grep -o '"email"' | wc -l | tr -d ' ')
# One "watchExpiration" key an account ("status" also appears in each
# account's Gmail quota).
accounts=$(api /api/v1/accounts | grep -o '"watchExpiration"' | wc -l | tr -d ' ')
say "the API lists $users user(s) and $accounts Gmail account(s)"

say "SIGTERM to mailroom (pid $mailroom_pid)"
stop_start=$SECONDS
kill -TERM "$mailroom_pid"
while kill -0 "$make_pid" 2>/dev/null; do
	[ $((SECONDS - stop_start)) -lt "$stop_timeout" ] || fail "still running ${stop_timeout}s after SIGTERM"
	sleep 0.2
done
code=0
wait "$make_pid" || code=$?
[ "$code" -eq 0 ] || fail "make run exited with code $code after SIGTERM, want 0"
grep -q "stopped cleanly" "$log" || fail "mailroom did not log \"stopped cleanly\""
say "exited with code 0 $((SECONDS - stop_start))s after SIGTERM and logged \"stopped cleanly\""
say "OK: make run works on this machine ($((SECONDS - start))s in all)"
