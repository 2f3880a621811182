"""Runs the test suite and writes a JSON report to report.json."""

import json
import platform
import time
import unittest

started = time.time()
suite = unittest.defaultTestLoader.discover(".", pattern="test_*.py")
result = unittest.TextTestRunner(verbosity=0).run(suite)
report = {
    "python": platform.python_version(),
    "testsRun": result.testsRun,
    "failures": [str(t) for t, _ in result.failures],
    "errors": [str(t) for t, _ in result.errors],
    "ok": result.wasSuccessful(),
    "durationMs": round((time.time() - started) * 1000, 1),
}
with open("report.json", "w") as f:
    json.dump(report, f, indent=2)
print(json.dumps(report))
