// Package wire is cobbled's lean read protocol: the Serve API's BatchGet as
// length-prefixed frames over plain TCP, for the Go router. gRPC stays the
// API for callers in other languages; a node serves both on one port (Split
// tells them apart by the first bytes of a connection).
//
// Why: at one client a bare grpc-go call around the same MultiGet is ~2×
// Redis MGET at p50 on the development machine, and grpc-go spends its CPU
// on HTTP/2 framing (16 KB DATA frames copied into its write buffer, read
// back out of the client's frame buffers and gathered into one message) and
// flow control. Here a response is written with one writev straight from
// the node's framing buffer and the values pinned in RocksDB's block cache
// (no Go copy on the node) and read with one read into a pooled buffer the
// values then alias (servepb.Release gives it back).
//
// # Connection
//
// A client opens a TCP connection and sends Magic (8 bytes). Then both
// sides exchange frames, each
//
//	length uint32 (big-endian; bytes after this field: 9 + payload)
//	kind   uint8
//	id     uint64 (big-endian; the request's id, chosen by the client)
//	payload
//
// Kinds:
//   - KindRequest (client → node): payload = timeout in nanoseconds
//     (uint64, 0 = none) followed by a protobuf BatchGetRequest (keys and
//     version, the same encoding as over gRPC);
//   - KindResponse (node → client): payload = the encoded BatchGetResponse,
//     byte for byte what gRPC would carry;
//   - KindError (node → client): payload = gRPC status code (uint32) and
//     the message (UTF-8): the same codes and texts as over gRPC;
//   - KindCancel (client → node): no payload; the node cancels request id
//     (a hedge's loser, a caller that gave up) and answers nothing more
//     for it.
//
// Requests are pipelined: a connection carries any number of requests at
// once, answered in any order, matched by id. Client keeps a small pool of
// connections per node (ClientOptions.Conns) and spreads requests over them.
//
// # Invariants
//
//   - A frame longer than the receiver's MaxFrame, of an unknown kind, or a
//     malformed payload closes the connection with an error naming the peer
//     (the node logs it; the client fails every request in flight on it
//     with codes.Unavailable naming the node's address). Nothing after a
//     bad frame is trusted.
//   - A broken connection fails its requests in flight with
//     codes.Unavailable; the next request dials again (a restarted node is
//     reached without the caller doing anything).
//   - Every request gets exactly one answer (response or error) unless the
//     client cancelled it or the connection broke.
//   - The node answers a request only after its handler has returned; the
//     handler's parts are released after they are written (or the write
//     failed, or the request was cancelled). A write that has not finished
//     1 s after the request's deadline (ServerOptions.WriteTimeout after
//     it began, for a request without one) closes the connection.
package wire
