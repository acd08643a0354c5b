// Package batch defines the batch manifest: the contract between the SST
// builder and Lorry (which write batches), the control plane (which orders
// them) and the serving nodes (which apply them).
//
// A batch is one or more SST files of one partition plus manifest.json, stored
// under Prefix(partition, id). A batch is registered only after every object
// of it exists; its id is unique and never reused for other content.
package batch
