#!/usr/bin/env python3
"""Print the host ledger of LEDGER_DIR as one JSON document, the way the
tests read it: ledger.json (claims, and what whole-ledger transactions
added) with every boot's container records (boot-*/r-*) appended to its
"reservations" (core/src/ledger.rs owns the layout). Indented by 4, so a
test greps one spelling, "key": value. Nothing there: an empty ledger.
usage: tests/ledger_view.py LEDGER_DIR"""
import glob
import json
import os
import sys

d = sys.argv[1]
try:
    with open(os.path.join(d, "ledger.json")) as f:
        led = json.load(f)
except FileNotFoundError:
    led = {"version": 2, "reservations": []}
for path in sorted(glob.glob(os.path.join(d, "boot-*", "r-*"))):
    try:
        with open(path) as f:
            led["reservations"].append(json.load(f))
    except FileNotFoundError:  # released while we listed
        pass
print(json.dumps(led, indent=4))
