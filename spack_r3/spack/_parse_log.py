"""Run by ``spack python``: print the error events of a build log as one JSON line.

Usage: spack python _parse_log.py LOG [CONTEXT]
"""

import json
import sys

import spack.util.log_parse

context = int(sys.argv[2]) if len(sys.argv) > 2 else 3
errors, _warnings = spack.util.log_parse.parse_log_events(sys.argv[1], context=context, jobs=1)
events = []
for e in errors:
    events.append(
        {
            "line": e.line_no,
            "text": e.text,
            "before": list(e.pre_context or []),
            "after": list(e.post_context or []),
        }
    )
print(json.dumps(events))
