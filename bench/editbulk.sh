#!/bin/bash
# How soon a note saved during a long first sweep is found (BENCHMARKS, twentieth session).
#   bash bench/editbulk.sh CODE_DIR WORK_DIR        (CODE_DIR: a checkout; WORK_DIR: scratch)
# Makes a 40,000-note vault (bench/genvault.py) once in WORK_DIR, starts a keyword-only daemon of
# CODE_DIR's code on it with a fresh home, edits an indexed wiki note and creates a note 8 s
# later, and polls `sidecar search` every 0.5 s until both are found.
set -u
CODE=$(cd "$1" && pwd); W=$2; HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-$HERE/../.venv/bin/python}
S="env PYTHONPATH=$CODE $PY -m sidecar"
mkdir -p "$W"; [ -d "$W/vault" ] || $PY "$HERE/genvault.py" "$W/vault" 40000 > /dev/null
rm -rf "$W/home" "$W/run"; mkdir -p "$W/home" "$W/run"; chmod 700 "$W/run"
printf "home: $W/home\nsocket: $W/run/sidecar.sock\nvault: {path: $W/vault}\nembedder: {enabled: false}\n" > "$W/c.yaml"
(cd "$CODE" && nice -n 10 $S serve --config "$W/c.yaml" > "$W/serve.out" 2> "$W/serve.err") & P=$!
sleep 8
F="$W/vault/wiki/Sub00/Deep0/Notiz 00000.md"; echo "editedtokenqq" >> "$F"
printf '# New\n\nnewtokenqq\n' > "$W/vault/Area05/newnote.md"; T1=$(date +%s.%N)
e=""; n=""
while [ -z "$e" ] || [ -z "$n" ]; do
  [ -z "$e" ] && $S search editedtokenqq --config "$W/c.yaml" 2>/dev/null | grep -q "Notiz 00000" && e=$(echo "$(date +%s.%N)-$T1" | bc) && echo "edited note found after ${e} s"
  [ -z "$n" ] && $S search newtokenqq --config "$W/c.yaml" 2>/dev/null | grep -q newnote && n=$(echo "$(date +%s.%N)-$T1" | bc) && echo "new note found after ${n} s"
  sleep 0.5
done
kill -TERM $P; wait $P 2>/dev/null
grep -m1 sweep_done "$W/serve.err" | cut -c1-160
sed -i '$d' "$F"; rm -f "$W/vault/Area05/newnote.md"
