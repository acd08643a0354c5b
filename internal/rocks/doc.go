// Package rocks holds the RocksDB settings that the SST builder (writer) and
// the cobbled serving node (reader) must share: the same block-based table
// options, so an ingested file is read exactly as a locally written one.
//
// Every grocksdb object returned here is owned by the caller and must be
// destroyed exactly once (Destroy), after every object that uses it.
package rocks
