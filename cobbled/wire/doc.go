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
//     the message (UTF-8): the same codes and texts as over gRPC. Id 0
//     (never a request's: a client's ids start at 1) is about the whole
//     connection: the node refuses it (codes.ResourceExhausted, over its
//     connection cap) and closes it; the client fails every request on it
//     with that code;
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
//
// # Limits (a hostile client)
//
// The node's side is bounded whatever a client sends; every bound is a
// ServerOptions field whose zero value is a safe default.
//
//   - Memory follows the bytes that arrive: a request frame's buffer
//     starts small and doubles as its payload arrives, up to the length
//     its header claims (at most MaxFrame, 16 MiB). All connections
//     together hold at most MaxBufferedBytes (64 MiB) of requests, being
//     received or answered; a request past it is answered
//     codes.ResourceExhausted. A connection that has not sent Magic holds
//     no read buffer; one that has holds 16 KiB.
//   - A request is checked as its bytes arrive, before it is decoded: more
//     than MaxKeys (1024) keys, a key longer than MaxKeyBytes (1 KiB; its
//     length prefix is enough) or over 64 KiB of other fields is answered
//     codes.InvalidArgument and the rest of its frame is read past without
//     keeping it; the connection stays usable. Only a malformed encoding
//     closes the connection.
//   - Deadlines: Magic within HandshakeTimeout (10s); between frames a
//     connection with nothing in flight is closed after IdleTimeout (5m);
//     from a frame's first byte to its last, FrameTimeout (10s), else the
//     stalled connection is closed. Client retires idle connections after
//     ClientOptions.IdleTimeout (1m), before the node would.
//   - Caps: MaxConns (1024) connections per listener (one more gets a
//     KindError frame of id 0, codes.ResourceExhausted, and is closed);
//     MaxInFlight (512) requests answered at once per connection and
//     MaxServerInFlight (4096) for the server; a request past either is
//     answered codes.ResourceExhausted and the connection stays.
//   - Logs: at most one line per reason (handshake, bad frame, stalled
//     frame, connection cap, refused request) per LogInterval (10s), each
//     counting the lines suppressed before it. An idle connection's close
//     is not logged.
//   - Errors quote a key by its first 32 bytes (hex) and its length, never
//     whole.
package wire
