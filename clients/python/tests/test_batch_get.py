import socket
import threading
import time
import unittest
from concurrent import futures

import grpc

import pillar_client
from pillar_client import (Client, ConfigError, DeadlineExceededError, InvalidKeyError, ResponseTooLargeError,
                           UnavailableError, VersionError)

from pillar_client._gen import serve_pb2

from _harness import ENV, assert_record, expectations, need_cluster


@need_cluster
class BatchGetTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.addr = ENV["PILLAR_TEST_ROUTER"]
        cls.client = Client(cls.addr, timeout=5.0)
        cls.exp = expectations()

    @classmethod
    def tearDownClass(cls):
        cls.client.close()

    def test_twelve_url_pages_by_bytes_key(self):
        keys = [bytes.fromhex(v["key"]) for v in self.exp["url_pages"]]
        self.assertEqual(len(keys), 12)
        got = self.client.batch_get(keys)
        self.assertEqual(set(got), set(keys))
        for k in keys:
            assert_record(self, got[k], self.exp["records"][k.hex()])

    def test_twelve_url_pages_by_url(self):
        urls = [v["url"] for v in self.exp["url_pages"]]
        got = self.client.batch_get(urls)
        self.assertEqual(set(got), set(urls))
        for v in self.exp["url_pages"]:
            assert_record(self, got[v["url"]], self.exp["records"][v["key"]])

    def test_synthetic_keys_and_absent(self):
        keys = [bytes.fromhex(h) for h in self.exp["synthetic_keys"]]
        absent = bytes.fromhex(self.exp["absent_key"])
        got, version = self.client.batch_get_versioned(keys + [absent, "https://never-stored.example/"])
        self.assertEqual(set(got), set(keys))  # absent keys are absent from the dict
        self.assertIsInstance(version, str)
        for k in keys:
            assert_record(self, got[k], self.exp["records"][k.hex()])

    def test_empty_and_duplicates(self):
        self.assertEqual(self.client.batch_get([]), {})
        k = bytes.fromhex(self.exp["synthetic_keys"][0])
        got = self.client.batch_get([k, k, bytearray(k)])
        self.assertEqual(list(got), [k])

    def test_pool_round_robin_threads(self):
        keys = [bytes.fromhex(h) for h in self.exp["synthetic_keys"]]
        errors = []
        with Client(self.addr, pool_size=3, timeout=5.0) as c:
            def work():
                try:
                    for _ in range(10):
                        self.assertEqual(len(c.batch_get(keys)), len(keys))
                except Exception as e:  # pragma: no cover - reported below
                    errors.append(e)
            ts = [threading.Thread(target=work) for _ in range(4)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
        self.assertEqual(errors, [])

    def test_bad_keys(self):
        with self.assertRaisesRegex(InvalidKeyError, "want 16 bytes, got 3") as cm:
            self.client.batch_get([b"abc"])
        self.assertIn(self.addr, str(cm.exception))
        with self.assertRaisesRegex(InvalidKeyError, "not absolute"):
            self.client.batch_get(["example.com/x"])
        with self.assertRaises(InvalidKeyError):
            self.client.batch_get([42])

    def test_unknown_version(self):
        with self.assertRaises(VersionError) as cm:
            self.client.batch_get([bytes.fromhex(self.exp["synthetic_keys"][0])], version="no-such/version")
        msg = str(cm.exception)
        self.assertIn("router %s" % self.addr, msg)
        self.assertIn("unknown version 'no-such/version'", msg)

    def test_response_too_large(self):
        keys = [bytes.fromhex(v["key"]) for v in self.exp["url_pages"]]
        with Client(self.addr, max_response_bytes=2000) as c:
            with self.assertRaises(ResponseTooLargeError) as cm:
                c.batch_get(keys)
        self.assertIn("router %s: response larger than max_response_bytes=2000" % self.addr, str(cm.exception))

    def test_dead_address_within_timeout(self):
        dead = ENV["PILLAR_TEST_DEAD"]
        with Client(dead, timeout=1.0, retries=5) as c:
            t0 = time.monotonic()
            with self.assertRaises((UnavailableError, DeadlineExceededError)) as cm:
                c.batch_get([bytes(16)])
            elapsed = time.monotonic() - t0
        self.assertLess(elapsed, 1.0 + 1.0)
        # Refused at once: the attempts run out first (a deadline error
        # only on a very slow machine), each naming the address.
        self.assertRegex(str(cm.exception), r"router %s: (unavailable after 5 attempts|deadline of 1.0s exceeded)" % dead)

    def test_silent_tcp_server(self):
        # Accepts connections and never speaks HTTP/2: no hang past the timeout.
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen(8)
        addr = "127.0.0.1:%d" % srv.getsockname()[1]
        try:
            with Client(addr, timeout=0.7) as c:
                t0 = time.monotonic()
                with self.assertRaises((UnavailableError, DeadlineExceededError)) as cm:
                    c.batch_get([bytes(16)])
                self.assertLess(time.monotonic() - t0, 0.7 + 1.0)
            self.assertIn("router %s: " % addr, str(cm.exception))
        finally:
            srv.close()

    def test_slow_server_deadline(self):
        # A gRPC server whose BatchGet never answers in time.
        release = threading.Event()

        def slow(request, context):
            release.wait(10)
            return serve_pb2.BatchGetResponse()

        handler = grpc.method_handlers_generic_handler("pillar.serve.v1.Serve", {
            "BatchGet": grpc.unary_unary_rpc_method_handler(
                slow, request_deserializer=serve_pb2.BatchGetRequest.FromString,
                response_serializer=serve_pb2.BatchGetResponse.SerializeToString)})
        srv = grpc.server(futures.ThreadPoolExecutor(max_workers=4), handlers=[handler])
        port = srv.add_insecure_port("127.0.0.1:0")
        srv.start()
        addr = "127.0.0.1:%d" % port
        try:
            with Client(addr, timeout=0.7) as c:
                t0 = time.monotonic()
                with self.assertRaises(DeadlineExceededError) as cm:
                    c.batch_get([bytes(16)])
                elapsed = time.monotonic() - t0
            self.assertGreater(elapsed, 0.6)
            self.assertLess(elapsed, 0.7 + 1.0)
            self.assertEqual(str(cm.exception), "router %s: deadline of 0.7s exceeded" % addr)
            self.assertIsInstance(cm.exception, TimeoutError)
        finally:
            release.set()
            srv.stop(0)

    def test_token(self):
        # On loopback a token may go in plaintext (the router ignores it).
        with Client(self.addr, token="secret") as c:
            self.assertEqual(len(c.batch_get([bytes.fromhex(self.exp["synthetic_keys"][0])])), 1)
        with self.assertRaisesRegex(ConfigError, "never sent in plaintext beyond loopback"):
            Client("10.1.2.3:7400", token="secret")
        self.assertTrue(pillar_client.is_loopback("localhost:1"))
        self.assertTrue(pillar_client.is_loopback("[::1]:1"))
        self.assertFalse(pillar_client.is_loopback("example.com:1"))

    def test_config_errors(self):
        for kw in [dict(timeout=0), dict(retries=0), dict(pool_size=0), dict(tls_cert="x"),
                   dict(tls_cert="x", tls_key="y"), dict(tls_ca="/nonexistent/ca.pem")]:
            with self.assertRaises(ConfigError, msg=kw):
                Client(self.addr, **kw)


if __name__ == "__main__":
    unittest.main()
