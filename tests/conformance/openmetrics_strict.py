"""Reads an OpenMetrics text page with prometheus_client's strict parser.

Usage: openmetrics_strict.py PAGE_FILE. Prints the page's samples as JSON, one family
per line ({"name", "type", "samples": [[name, labels, value], ...]}), and exits 0; or
prints "refused: <reason>" and exits 1 when the parser refuses the page (a clashing
name, a malformed line, a line after # EOF, ...).
"""

import json
import sys

from prometheus_client.openmetrics.parser import text_string_to_metric_families


def main() -> int:
    with open(sys.argv[1], encoding="utf-8", newline="") as f:
        text = f.read()
    try:
        families = list(text_string_to_metric_families(text))
    except Exception as error:  # the parser raises ValueError, and others on bad input
        print(f"refused: {type(error).__name__}: {error}")
        return 1
    for family in families:
        samples = [[s.name, s.labels, s.value] for s in family.samples]
        print(json.dumps({"name": family.name, "type": family.type, "samples": samples}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
