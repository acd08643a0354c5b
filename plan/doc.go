// Package plan is the cost model behind `pillar plan`: how many cobbled
// serving nodes a workload needs, what else the deployment uses (object
// store, control plane, Lorry, cross-AZ transfer), what that costs per
// month, and what the same workload costs on DynamoDB, on-demand and
// provisioned, under its rounding rules.
//
// Compute is pure: no I/O, no clock, no network. Prices come from a price
// file (LoadPrices; the default, testdata/prices-aws-us-east-1.yaml, is
// embedded) in which every figure carries its date and public source; CPU
// rate and hedge rate come from measured defaults or a `pillar bench read`
// results.json (ReadBench).
//
// # The model
//
// Serving nodes are the largest of four needs, rounded up to a multiple of
// the zone count (every zone holds the same number of nodes):
//
//	egress   = rps × keys × (item + 24 B wire) × (1 + hedge rate)  ÷  (baseline NIC × NICShare)
//	storage  = replicas × retained versions × pages × (item × compression + 40 B)  ÷  (local disk × DiskFill)
//	cpu      = rps × keys × (1 + hedge rate)  ÷  (keys/s per vCPU × vCPUs × CPUTarget)
//	replicas = a partition's replicas sit on distinct nodes
//
// Cross-AZ bytes are answers that cross zones: the primaries not answered
// in the caller's zone (1 − same-zone fraction; by default min(1,
// replicas/zones), since the control plane spreads a partition's replicas
// over distinct zones and the router prefers the caller's) plus every
// hedge and failover (it goes to another replica, hence another zone).
// Each crossing GB is charged on both sides. Nodes fill from the object
// store, never from each other, and EC2↔S3 in one region is free, so
// replication adds no cross-AZ bytes.
//
// The object store holds RetainedVersions full snapshots plus the deltas
// since the last rebuild (on average half the interval's). Requests: a
// rebuild writes every SST file in 16 MiB multipart parts (objstore's part
// size) plus a manifest per partition, and every replica reads each file
// and manifest back with one GET; Lorry closes a batch per partition every
// MaxBatchAge in which a record arrived (Poisson arrivals over P
// partitions) or every 8 MiB, each batch one SST and one manifest, read
// by every replica. Those batch registrations are the control plane's
// load, compared with its measured RegisterBatch capacity on PostgreSQL.
//
// DynamoDB serves the same item reads with no hedging: each read is the
// item (value + attribute names and key) rounded up to 4 KB read units,
// halved when eventually consistent; each write rounded up to 1 KB write
// units; a rebuild rewrites every item (import from S3 creates a new table
// and is capped at 15 TB per import in us-east-1, below a corpus of this
// size); storage is item + 100 B per item, per GB-month. BatchGetItem
// takes at most 100 items and 16 MB per call: the call count is reported,
// it does not change the bill (items are billed one by one). Provisioned
// capacity is sized for the mean rate at DynamoTargetUtil (auto scaling's
// target), rebuild writes as extra WCU-hours.
//
// # Invariants
//
//   - More rps, keys, item bytes, hedge rate or less NIC share never lowers
//     the node count; more pages, replicas, retained versions or
//     compression never lowers it; more per-core rate or disk never raises
//     it (tested).
//   - A node count is at least the replica count and a multiple of zones.
//   - ReadUnits(4.1 KB, strong) = 2, ReadUnits(4.1 KB, eventual) = 1,
//     WriteUnits rounds up to 1 KB: the DynamoDB rounding rules, tested.
//   - A price file with an unknown field, a missing date or source, or a
//     negative price is refused with the field's name.
//
// # Assumptions (each an Options field or a price, so each can be changed)
//
//   - Steady load: the mean rate is the peak rate. Provisioned DynamoDB
//     and the node count both assume it; bursts favour on-demand.
//   - Sizing uses a node's baseline network bandwidth, not its "up to"
//     burst, half of it for answers; 70% of the disk; 60% CPU.
//   - The CPU rate default was measured with the whole read benchmark
//     (nodes, router, clients) in one process, so it overstates the CPU a
//     node needs; see DefaultKeysPerCoreS.
//   - Values are stored uncompressed unless Compression says otherwise.
//   - DynamoDB keeps one version of each item (no side-by-side
//     publications, no rollback copy) and no DAX: both favour DynamoDB.
//   - Left out on both sides: the MapReduce runner that builds exports
//     (needed by either), the callers' own compute, request bytes (keys are
//     16 bytes), reserved pricing and free tiers, PostgreSQL's EBS volumes.
package plan
