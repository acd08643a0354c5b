import time
import unittest

from pillar_client import Client, DeadlineExceededError, PillarError, UnavailableError

from _harness import ENV, assert_record, expectations, need_cluster


@need_cluster
class TLSTest(unittest.TestCase):
    def setUp(self):
        self.addr = ENV["PILLAR_TEST_TLS_ROUTER"]
        self.exp = expectations()
        self.keys = [bytes.fromhex(v["key"]) for v in self.exp["url_pages"]]

    def test_client_certificate(self):
        with Client(self.addr, tls_ca=ENV["PILLAR_TEST_CA"], tls_cert=ENV["PILLAR_TEST_CERT"],
                    tls_key=ENV["PILLAR_TEST_KEY"], token="t0ken", timeout=5.0) as c:
            got = c.batch_get(self.keys)
        self.assertEqual(len(got), 12)
        for k in self.keys:
            assert_record(self, got[k], self.exp["records"][k.hex()])

    def test_without_client_certificate(self):
        with Client(self.addr, tls_ca=ENV["PILLAR_TEST_CA"], timeout=2.0) as c:
            t0 = time.monotonic()
            with self.assertRaises(PillarError) as cm:
                c.batch_get(self.keys)
            elapsed = time.monotonic() - t0
        msg = str(cm.exception)
        self.assertLess(elapsed, 3.0)
        self.assertIn("router %s" % self.addr, msg)
        self.assertIsInstance(cm.exception, (UnavailableError, DeadlineExceededError), msg)
        self.assertIn("give tls_cert and tls_key", msg)

    def test_identity_not_allowed(self):
        # A valid certificate of another role (writer/lorry): the router
        # allows only pillar://reader/*.
        with Client(self.addr, tls_ca=ENV["PILLAR_TEST_CA"], tls_cert=ENV["PILLAR_TEST_OTHER_CERT"],
                    tls_key=ENV["PILLAR_TEST_OTHER_KEY"], timeout=2.0) as c:
            with self.assertRaises((UnavailableError, DeadlineExceededError)) as cm:
                c.batch_get(self.keys)
        self.assertIn("router %s" % self.addr, str(cm.exception))

    def test_plaintext_to_tls_port(self):
        with Client(self.addr, timeout=2.0) as c:
            t0 = time.monotonic()
            with self.assertRaises(PillarError) as cm:
                c.batch_get(self.keys)
            self.assertLess(time.monotonic() - t0, 3.0)
        self.assertIn("router %s" % self.addr, str(cm.exception))


if __name__ == "__main__":
    unittest.main()
