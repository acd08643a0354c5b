// Package servepb is the wire API of a cobbled serving node: the Serve
// service with its single BatchGet method (serve.proto), and client helpers
// for BatchGet's large responses (~600 KB for 12 keys of ~50 KB):
//
//   - DialOptions: flow-control windows and buffer sizes for large
//     responses, a receive limit, ClientCodec and a non-zeroing transport
//     buffer pool.
//   - ClientCodec decodes a BatchGetResponse with one copy (values alias the
//     gathered message); with Pooled (PooledCallOption) the message buffer
//     comes from a pool and the caller must Release the response when done.
//   - DecodeBatchGetResponse is that decoder on its own; BufferPool is the
//     non-zeroing mem.BufferPool both ends use.
//
// Semantics: one Result per requested key, in request order, all read
// from one publication: the request's version ("" = the live one; a node
// resolves it from the routing it last saw, a router to a concrete id once
// per request), named in BatchGetResponse.version. A version the node does
// not hold gives each of its keys KEY_NOT_SERVED naming the version. KEY_OK with
// found=false means the node holds the key's partition and the key is
// absent; KEY_NOT_SERVED means it does not hold the partition; KEY_ERROR is
// a read failure of that partition. An empty request, a key that is not 16
// bytes or more keys than the node's limit fail the call with
// INVALID_ARGUMENT; a response over the node's byte limit with
// RESOURCE_EXHAUSTED. The node answers with a hand-encoded response that is
// byte-for-byte a BatchGetResponse (see package cobbled), so any protobuf
// client works.
package servepb

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative serve.proto
