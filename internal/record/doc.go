// Package record defines the prepared page record: the protobuf value stored
// under every page key in a serving SST (see record.proto), and helpers to
// pack embeddings into it.
//
// Embeddings are packed little-endian, dims elements, in one of three
// encodings: float32 (exact), float16 (IEEE binary16, round to nearest even;
// relative error at most 2^-11 for |x| in [2^-14, 65504], absolute error at
// most 2^-25 below that, ±Inf beyond) and int8 (symmetric, scale =
// max|x|/127, absolute error at most scale/2). Float16 is the default.
//
// Marshal is deterministic (same record, same bytes) so a rebuilt batch has
// the same checksums. Unmarshal rejects bytes that are not a record or whose
// chunks are inconsistent (embedding length ≠ dims × element size).
//
// Every function here is safe for concurrent use; records are plain values.
package record

//go:generate protoc --go_out=. --go_opt=paths=source_relative record.proto
