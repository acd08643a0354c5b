"""Faults: nodes killed, the router restarted. Named to run last."""

import threading
import time
import unittest

from pillar_client import Client, KeyStatusError, UnavailableError

from _harness import ENV, assert_record, control, expectations, need_cluster, wait_healthy


@need_cluster
class FaultsTest(unittest.TestCase):
    def setUp(self):
        self.addr = ENV["PILLAR_TEST_ROUTER"]
        self.nodes = int(ENV["PILLAR_TEST_NODES"])
        self.exp = expectations()
        self.keys = [bytes.fromhex(v["key"]) for v in self.exp["url_pages"]]
        self.client = Client(self.addr, timeout=5.0, retries=5)

    def tearDown(self):
        self.client.close()

    def check_all(self, got):
        self.assertEqual(set(got), set(self.keys))
        for k in self.keys:
            assert_record(self, got[k], self.exp["records"][k.hex()])

    def test_node_killed_failover(self):
        self.check_all(self.client.batch_get(self.keys))
        control("node/kill?i=0")
        try:
            # Every partition has a replica on each node: the router fails over.
            for _ in range(3):
                self.check_all(self.client.batch_get(self.keys))
        finally:
            control("node/restart?i=0")
        self.check_all(wait_healthy(self.client, self.keys))

    def test_all_nodes_killed(self):
        for i in range(self.nodes):
            control("node/kill?i=%d" % i)
        try:
            t0 = time.monotonic()
            with self.assertRaises(KeyStatusError) as cm:
                self.client.batch_get(self.keys)
            self.assertLess(time.monotonic() - t0, 5.0 + 1.0)
            e = cm.exception
            msg = str(e)
            self.assertIn("router %s: key %s:" % (self.addr, self.keys[0].hex()), msg)
            self.assertIn("and 11 more keys", msg)
            self.assertEqual(len(e.failures), 12)
            self.assertEqual(e.key, self.keys[0])
            self.assertEqual(e.records, {})
        finally:
            for i in range(self.nodes):
                control("node/restart?i=%d" % i)
        self.check_all(wait_healthy(self.client, self.keys))

    def test_router_restart(self):
        self.check_all(self.client.batch_get(self.keys))
        control("router/stop")
        started = False
        try:
            t0 = time.monotonic()
            with Client(self.addr, timeout=1.0, retries=3) as c:
                with self.assertRaises(UnavailableError) as cm:
                    c.batch_get(self.keys)
            self.assertLess(time.monotonic() - t0, 1.0 + 1.0)
            self.assertIn("router %s: unavailable after" % self.addr, str(cm.exception))
            # A client whose channels see the router down recovers by
            # retrying (UNAVAILABLE, with backoff) while it comes back.
            with Client(self.addr, timeout=8.0, retries=40, max_backoff=0.2) as c:
                starter = threading.Timer(1.0, control, args=("router/start",))
                t0 = time.monotonic()
                starter.start()
                started = True
                self.check_all(c.batch_get(self.keys))
                self.assertGreater(time.monotonic() - t0, 0.9)  # it did wait for the restart
                starter.join()
        finally:
            if not started:
                control("router/start")
        # The long-lived client recovers too.
        self.check_all(wait_healthy(self.client, self.keys))


if __name__ == "__main__":
    unittest.main()
