#!/usr/bin/env bash
# docs/design.md §10's scenario, with curl, against `idem proxy` in front of a backend:
#   bash curl-scenario.sh DEFAULT_PROXY_URL OK_200_PROXY_URL
# The first proxy replays with the original status, the second with --replay-status 200.
# Exits 1 at the first answer that is not the expected one.
set -euo pipefail
default=$1
ok200=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }
expect() { # expected actual what
  [ "$1" = "$2" ] || fail "$3: expected $1, got $2 ($(cat "$tmp/body" 2>/dev/null))"
  echo "ok: $3: $2"
}
header() { # name: prints the value of the last answer's header, or nothing
  tr -d '\r' <"$tmp/headers" | awk -v name="$(tr 'A-Z' 'a-z' <<<"$1")" \
    'BEGIN { FS = ": " } tolower($1) == name { print $2 }'
}
post() { # base-url key body: prints the status
  curl -sS -o "$tmp/body" -D "$tmp/headers" -w '%{http_code}' -X POST "$1/orders" \
    -H "Idempotency-Key: $2" -H 'Content-Type: application/json' --data "$3"
}

# --replay-status 200
expect 201 "$(post "$ok200" '"order-1"' '{"item":"tea","qty":1}')" "first POST"
first=$(cat "$tmp/body")
expect "" "$(header Idempotent-Replayed)" "the first answer is not a replay"
expect 200 "$(post "$ok200" '"order-1"' '{"qty":1, "item":"tea"}')" "the same POST again"
expect "$first" "$(cat "$tmp/body")" "the replayed body"
expect true "$(header Idempotent-Replayed)" "Idempotent-Replayed"
expect 422 "$(post "$ok200" '"order-1"' '{"item":"tea","qty":2}')" "another body under the same key"
expect application/problem+json "$(header Content-Type)" "the 422's content type"

# the default: the original status
expect 201 "$(post "$default" '"order-2"' '{"item":"cake"}')" "first POST (default proxy)"
first=$(cat "$tmp/body")
expect 201 "$(post "$default" '"order-2"' '{"item":"cake"}')" "the same POST again (default proxy)"
expect "$first" "$(cat "$tmp/body")" "the replayed body (default proxy)"
expect true "$(header Idempotent-Replayed)" "Idempotent-Replayed (default proxy)"
expect 422 "$(post "$default" '"order-2"' '{"item":"pie"}')" "another body under the same key (default proxy)"
echo "curl scenario passed"
