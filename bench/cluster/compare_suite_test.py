#!/usr/bin/env python3
"""compare_suite.py's verdict v2: the same examples as suite_verdict_test.cc, on csv rows."""
import csv
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_suite as cs  # noqa: E402


def row(seed, **values):
    """One suite_seeds.csv row: values as {field_strategy: number}."""
    r = {'name': 's000', 'trace_seed': str(seed), 'slo_share': '0'}
    r.update({k: str(v) for k, v in values.items()})
    return r


def free(seed, rr, lp111, lp322, mine, e2e_mine=100):
    return row(seed, ttft_free_rr=rr, ttft_free_lp111=lp111, ttft_free_lp322=lp322,
               ttft_free_pl_least=mine, ttft_p95_rr=rr, ttft_p95_lp111=lp111,
               ttft_p95_lp322=lp322, ttft_p95_pl_least=mine, e2e_p50_rr=100, e2e_p50_lp111=100,
               e2e_p50_lp322=100, e2e_p50_pl_least=e2e_mine)


class VerdictV2(unittest.TestCase):
    def judge(self, rows):
        return cs.verdict_v2(rows, rows, 'pl_least')

    def test_ttft_tolerance_and_loss_size(self):
        self.assertEqual(self.judge([free(1, 120, 100, 140, 100.4)])['outcome'], 'as good')
        v = self.judge([free(1, 120, 100, 140, 112)])
        self.assertEqual(v['outcome'], 'loss')
        self.assertAlmostEqual(v['ttft']['loss'], 0.12)
        self.assertEqual(v['ttft']['against'], 'lp111')
        self.assertIsNone(v['slo'])
        self.assertFalse(v['old_as_good'])

    def test_mean_over_seeds_and_ties_within_the_spread(self):
        v = self.judge([free(1, 200, 100, 150, 98), free(2, 200, 100, 150, 104),
                        free(3, 200, 100, 150, 107)])
        self.assertAlmostEqual(v['ttft']['delta'], 0.03)
        self.assertAlmostEqual(v['ttft']['spread'], 0.045)
        self.assertEqual(v['outcome'], 'tie')
        v = self.judge([free(1, 200, 100, 150, 102), free(2, 200, 100, 150, 103),
                        free(3, 200, 100, 150, 104)])
        self.assertEqual(v['outcome'], 'loss')

    def test_populations_are_judged_on_their_own(self):
        def mixed(att_mine):
            return row(1, ttft_free_rr=50, ttft_free_lp111=60, ttft_free_lp322=70,
                       ttft_free_pl_least=50.1, slo_pop_rr=80, slo_pop_lp111=85,
                       slo_pop_lp322=90, slo_pop_pl_least=att_mine, e2e_p50_rr=100,
                       e2e_p50_lp111=100, e2e_p50_lp322=100, e2e_p50_pl_least=100,
                       ttft_p95_rr=90, ttft_p95_lp111=70, ttft_p95_lp322=80,
                       ttft_p95_pl_least=75, slo_rr=90, slo_lp111=92, slo_lp322=95,
                       slo_pl_least=95)
        v = self.judge([mixed(89.6)])
        self.assertEqual((v['ttft']['against'], v['slo']['against']), ('rr', 'lp322'))
        self.assertEqual(v['outcome'], 'as good')
        self.assertFalse(v['old_as_good'])
        v = self.judge([mixed(89.4)])
        self.assertEqual(v['slo']['outcome'], 'loss')
        self.assertAlmostEqual(v['slo']['loss'], 0.6)
        self.assertEqual(v['outcome'], 'loss')

    def test_e2e_guard(self):
        self.assertEqual(self.judge([free(1, 120, 100, 140, 90, 104.9)])['outcome'], 'as good')
        v = self.judge([free(1, 120, 100, 140, 90, 106)])
        self.assertEqual(v['e2e']['outcome'], 'loss')
        self.assertEqual(v['outcome'], 'loss')

    def test_the_command_line_reads_suite_seeds_csv(self):
        with tempfile.TemporaryDirectory() as d:
            rows = [free(1, 120, 100, 140, 112), free(2, 120, 100, 140, 113)]
            with open(os.path.join(d, 'suite_seeds.csv'), 'w', newline='') as f:
                w = csv.DictWriter(f, fieldnames=list(rows[0]))
                w.writeheader()
                w.writerows(rows)
            out = subprocess.run([sys.executable, cs.__file__, os.path.join(d, 'suite.csv'),
                                  os.path.join(d, 'suite.csv')], capture_output=True, text=True,
                                 check=True).stdout
            self.assertIn('at least as good in 0 of 1 (ties 0, losses 1)', out)
            self.assertIn('(a) +12.5%', out)  # the mean of 112 and 113 ms


if __name__ == '__main__':
    unittest.main()
