#!/bin/sh
# A `keel runner --exec` worker that wraps wc(1): it counts the lines, words and bytes of the
# job's `text` argument. One process runs per job:
#
#   keel runner --exec --url http://127.0.0.1:8080 --runner-id text --tool text_wc \
#       --env-allow PATH --timeout 10s -- deploy/examples/exec-runner/wc.sh
#
# stdin:  {"job_id":…,"execution_id":…,"step_id":…,"tool_id":"text_wc",
#          "arguments":{"text":"…"},"attempt":1,"deadline":"…"}
# stdout: {"success":true,"data":{"lines":1,"words":2,"bytes":12}}
#
# JSON is read with python3 (no jq needed); the counting is wc's. See docs/guardrails.md.
set -eu

job=$(head -n 1)

# The text, followed by an "x" so that the shell keeps its trailing newlines.
text=$(printf '%s' "$job" | python3 -c '
import json, sys
arguments = json.load(sys.stdin).get("arguments") or {}
text = arguments.get("text") if isinstance(arguments, dict) else None
if not isinstance(text, str):
    sys.exit(2)
sys.stdout.write(text + "x")
') || {
    echo '{"success":false,"error":"argument \"text\" (a string) is required"}'
    exit 0
}
text=${text%x}

# wc prints lines, words and bytes in that order.
# shellcheck disable=SC2046 # word splitting of wc's three numbers is intended
set -- $(printf '%s' "$text" | wc -l -w -c)
printf '{"success":true,"data":{"lines":%s,"words":%s,"bytes":%s}}\n' "$1" "$2" "$3"
