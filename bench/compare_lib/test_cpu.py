"""Tests of the server CPU accounting in servers.py, against child processes
that burn a known amount of CPU time. Run: python3 -m bench.compare_lib.test_cpu
(prints "N passed, M failed" for tests/run-all.sh)."""

import subprocess
import sys
import unittest

from .servers import cpu_between, cpu_reading

# The child: on each line from stdin, burn that many CPU seconds (in a new
# thread that then ends, if the line starts with "t"), then say "done".
CHILD = r"""
import sys, threading, time
def burn(s):
    end = time.thread_time() + s
    while time.thread_time() < end:
        pass
print("ready", flush=True)
for line in sys.stdin:
    line = line.strip()
    if line.startswith("t"):
        th = threading.Thread(target=burn, args=(float(line[1:]),))
        th.start(); th.join()
    else:
        burn(float(line))
    print("done", flush=True)
"""


class CpuAccounting(unittest.TestCase):
    def setUp(self):
        self.child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True)
        self.assertEqual(self.child.stdout.readline().strip(), "ready")

    def tearDown(self):
        self.child.stdin.close()
        self.child.wait(10)

    def measure(self, order):
        r0 = cpu_reading([self.child.pid])
        self.child.stdin.write(order + "\n")
        self.child.stdin.flush()
        self.assertEqual(self.child.stdout.readline().strip(), "done")
        return cpu_between(r0, cpu_reading([self.child.pid]))

    def test_busy_main_thread_to_the_millisecond(self):
        # 0.235 s is between ticks: tick counts would say 0.23 or 0.24.
        got = self.measure("0.235")
        self.assertGreaterEqual(got, 0.235)
        self.assertLess(got, 0.235 + 0.004, "more than the burn and a little interpreter work")

    def test_a_thread_that_ended_still_counts(self):
        got = self.measure("t0.3")
        self.assertGreater(got, 0.3 - 0.015, "the ended thread's time was lost")
        self.assertLess(got, 0.3 + 0.02)

    def test_idle_is_zero(self):
        r0 = cpu_reading([self.child.pid])
        r1 = cpu_reading([self.child.pid])
        self.assertLess(cpu_between(r0, r1), 0.001)


if __name__ == "__main__":
    result = unittest.TextTestRunner(verbosity=2).run(
        unittest.defaultTestLoader.loadTestsFromTestCase(CpuAccounting))
    bad = len(result.failures) + len(result.errors)
    print(f"{result.testsRun - bad} passed, {bad} failed")
    sys.exit(1 if bad else 0)
