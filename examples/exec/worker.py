#!/usr/bin/env python3
"""A leafline exec-sink worker: stores each event in SQLite, keyed by
event_id, so that a redelivered event is absorbed. Usage: worker.py EVENTS_DB

leafline writes one event per line on stdin and reads one result per line on
stdout. An event whose data is not a JSON object is refused for good ("fail":
leafline dead-letters it); a database error asks for a retry."""
import json, sqlite3, sys

db = sqlite3.connect(sys.argv[1], timeout=10)
db.execute("PRAGMA synchronous=FULL")
db.execute("CREATE TABLE IF NOT EXISTS events"
           " (event_id TEXT PRIMARY KEY, subject TEXT, data TEXT)")
for line in sys.stdin:  # ends when leafline closes stdin: exit then
    ev = json.loads(line)
    result = {"event_id": ev["event_id"], "result": "ok"}
    if not isinstance(ev.get("data"), dict):
        result.update(result="fail", error="data is not a JSON object")
    else:
        try:
            with db:  # one transaction, committed before the answer
                db.execute("INSERT OR IGNORE INTO events VALUES (?, ?, ?)",
                           (ev["event_id"], ev["subject"], json.dumps(ev["data"])))
        except sqlite3.Error as e:
            result.update(result="retry", error=str(e))
    print(json.dumps(result), flush=True)
