package plan

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Measured defaults. Each says how it was measured; `pillar plan --bench`
// replaces the first two with the user's own `pillar bench read` run.
const (
	// DefaultKeysPerCoreS is key reads per second per vCPU. In two runs of
	// `pillar bench read --scenarios healthy --redis - --duration 30s`
	// (values 100 B–100 KiB, mean ≈ 51 KB), 24,136 and 26,556 requests × 12
	// keys took 25.74 and 28.0 CPU-seconds of the benchmark process (3
	// cobbled nodes, the router and 4 clients, all in one process, talking
	// gRPC over loopback; CPU time from /proc/PID/stat over the measured
	// window): 11,252 and 11,381 keys per CPU-second, rounded down. The
	// nodes' own share is smaller than the whole process's, so this
	// overstates the CPU a node needs. Measured 2026-12-01 07:37 and 07:48
	// UTC on the project's shared 2-vCPU VM (load average 3.9–6.5 and
	// 10–12; CPU time, unlike wall time, is not diluted by the load).
	DefaultKeysPerCoreS = 11000
	// DefaultHedgeRate is extra sub-requests (hedges + failovers) per
	// primary in the same runs' healthy scenario: 840 / 24,136 = 3.5% and
	// 902 / 26,556 = 3.4%.
	DefaultHedgeRate = 0.035
	// DefaultLorryRecordsPerCoreS is Lorry's drain rate per vCPU: 1,450–2,400
	// records/s of 50 KB incompressible values on 2 cores (`go test -bench
	// DrainThroughput -cpu 2 ./lorry/`, README), the low end halved.
	DefaultLorryRecordsPerCoreS = 725
	// DefaultRegisterBatchPerS is the control plane's measured RegisterBatch
	// capacity on PostgreSQL with 8 writers, the low end of 2.1–3.4k/s
	// (`go test -bench . ./cobbled/control`, README).
	DefaultRegisterBatchPerS = 2100
)

// Fixed facts of the system the model relies on.
const (
	keyBytes         = 16              // page key (DESIGN: 16 bytes)
	perKeyWireBytes  = 24              // key + found flag + length prefixes in a BatchGet answer, per key
	perEntryBytes    = keyBytes + 24   // RocksDB per-entry overhead besides the value (key, seq/type, index share)
	s3PartSize       = 16 << 20        // objstore's S3PartSize default: multipart part and ranged-read size
	sstTargetFile    = 256 << 20       // sstbuilder's TargetFileSize default
	lorryBatchBytes  = 8 << 20         // lorry's MaxBatchBytes default
	lorryBatchAge    = time.Second     // lorry's MaxBatchAge default
	nodeHeartbeat    = 2 * time.Second // cobbled's Options.Heartbeat default
	routingRefresh   = 2 * time.Second // router's RefreshInterval default, one fetch per router
	dynamoReadUnit   = 4096            // DynamoDB read unit: 4 KB
	dynamoWriteUnit  = 1024            // DynamoDB write unit: 1 KB
	dynamoIndexBytes = 100             // DynamoDB adds 100 bytes per item to the billed storage
	dynamoBatchItems = 100             // BatchGetItem: at most 100 items per call
	dynamoBatchBytes = 16 << 20        // BatchGetItem: at most 16 MB per call
	dynamoMaxItem    = 400 << 10       // DynamoDB's item size limit
	gib              = 1 << 30         // AWS bills "GB" of storage and transfer as 2^30 bytes
)

// Workload is what the deployment must serve.
type Workload struct {
	// RPS is BatchGet requests per second. Required.
	RPS float64 `json:"rps"`
	// KeysPerRequest is the mean keys per request. Required.
	KeysPerRequest float64 `json:"keys_per_request"`
	// ItemBytes is the mean value (prepared page record) size in bytes.
	// Required.
	ItemBytes float64 `json:"item_bytes"`
	// Pages is the number of keys the serving tier holds. Required.
	Pages float64 `json:"pages"`
	// UpdatesPerS is incremental puts and deletes per second, delivered by
	// Lorry (DynamoDB: writes). The default value is 0.
	UpdatesPerS float64 `json:"updates_per_s"`
	// Replicas per partition. Required (at least 1).
	Replicas int `json:"replicas"`
	// Zones the nodes are spread over. Required (at least 1).
	Zones int `json:"zones"`
}

// Options are the model's assumptions. The zero value of every field means
// its documented default.
type Options struct {
	// Instance is the serving node's instance type in the price file. The
	// default value is "i4i.4xlarge".
	Instance string `json:"instance"`
	// NICShare is the share of the node's baseline network bandwidth that
	// BatchGet answers may use (the rest is for ingest, bursts and
	// headroom). The default value is 0.5.
	NICShare float64 `json:"nic_share"`
	// DiskFill is the share of the node's local disk that data may fill
	// (RocksDB compaction and snapshot swaps need the rest). The default
	// value is 0.7.
	DiskFill float64 `json:"disk_fill"`
	// CPUTarget is the CPU utilisation a node is sized for. The default
	// value is 0.6.
	CPUTarget float64 `json:"cpu_target"`
	// KeysPerCoreS is key reads per second per vCPU. The default value is
	// DefaultKeysPerCoreS.
	KeysPerCoreS float64 `json:"keys_per_core_s"`
	// RetainedVersions is how many publications every replica holds side
	// by side at the peak (live + the next one being ingested, or live +
	// previous). The default value is 2.
	RetainedVersions int `json:"retained_versions"`
	// Compression is stored bytes over value bytes (RocksDB block
	// compression). The default value is 1: values are mostly text and
	// embeddings, and the read benchmark's values are incompressible; set
	// it from `pillar sst inspect` on your own batches.
	Compression float64 `json:"compression"`
	// HedgeRate is extra sub-requests (hedges + failovers) per primary. The
	// default value nil means DefaultHedgeRate (or the --bench run's).
	HedgeRate *float64 `json:"hedge_rate"`
	// SameZoneFraction is the fraction of primary sub-requests answered in
	// the caller's zone. The default value nil means min(1, Replicas/Zones):
	// the control plane puts a partition's replicas in distinct zones and the
	// router prefers the caller's, so a caller finds a local replica exactly
	// when its zone holds one.
	SameZoneFraction *float64 `json:"same_zone_fraction"`
	// Partitions is the deployment's partition count P. The default value is
	// 4096.
	Partitions int `json:"partitions"`
	// RebuildsPerMonth is full snapshot rebuilds (new publications: a
	// re-chunk or re-embed published to serving) per month. The default
	// value nil means 1.
	RebuildsPerMonth *float64 `json:"rebuilds_per_month"`
	// LorryBatchAge is how long Lorry lets a partition's batch collect
	// records. The default value is lorry's MaxBatchAge default, 1s.
	LorryBatchAge time.Duration `json:"lorry_batch_age_ns"`
	// LorryBatchesPerS, when positive, is the delta batches Lorry registers
	// per second as measured (for example from the growth of the control plane's
	// batch log), instead of the rate derived from LorryBatchAge. The
	// default value 0 derives it.
	LorryBatchesPerS float64 `json:"lorry_batches_per_s"`
	// LorryRecordsPerCoreS is Lorry's drain rate per vCPU. The default
	// value is DefaultLorryRecordsPerCoreS.
	LorryRecordsPerCoreS float64 `json:"lorry_records_per_core_s"`
	// HelperInstance is the instance type of control-plane hosts and Lorry
	// workers. The default value is "m5.2xlarge".
	HelperInstance string `json:"helper_instance"`
	// ControlPlaneHosts: the control service and PostgreSQL primary and
	// standby. The default value is 3.
	ControlPlaneHosts int `json:"control_plane_hosts"`
	// RegisterBatchPerS is the control plane's RegisterBatch capacity. The
	// default value is DefaultRegisterBatchPerS.
	RegisterBatchPerS float64 `json:"register_batch_per_s"`
	// Routers is the number of router instances (callers linking the
	// router library), for the control plane's routing-fetch load. The
	// default value is 100.
	Routers int `json:"routers"`
	// StronglyConsistent prices DynamoDB reads strongly consistent. The
	// default value false prices them eventually consistent (what a cache of
	// published records needs).
	StronglyConsistent bool `json:"strongly_consistent"`
	// DynamoItemOverhead is bytes a DynamoDB item holds besides the value
	// (attribute names, the 16-byte key). The default value is 20.
	DynamoItemOverhead float64 `json:"dynamo_item_overhead"`
	// DynamoTargetUtil is provisioned capacity's target utilisation
	// (auto scaling's default target is 70%). The default value is 0.7.
	DynamoTargetUtil float64 `json:"dynamo_target_util"`
}

func (o *Options) ensureDefaults() {
	if o.Instance == "" {
		o.Instance = "i4i.4xlarge"
	}
	if o.NICShare == 0 {
		o.NICShare = 0.5
	}
	if o.DiskFill == 0 {
		o.DiskFill = 0.7
	}
	if o.CPUTarget == 0 {
		o.CPUTarget = 0.6
	}
	if o.KeysPerCoreS == 0 {
		o.KeysPerCoreS = DefaultKeysPerCoreS
	}
	if o.RetainedVersions == 0 {
		o.RetainedVersions = 2
	}
	if o.Compression == 0 {
		o.Compression = 1
	}
	if o.HedgeRate == nil {
		o.HedgeRate = ptr(DefaultHedgeRate)
	}
	if o.Partitions == 0 {
		o.Partitions = 4096
	}
	if o.RebuildsPerMonth == nil {
		o.RebuildsPerMonth = ptr(1.0)
	}
	if o.LorryBatchAge == 0 {
		o.LorryBatchAge = lorryBatchAge
	}
	if o.LorryRecordsPerCoreS == 0 {
		o.LorryRecordsPerCoreS = DefaultLorryRecordsPerCoreS
	}
	if o.HelperInstance == "" {
		o.HelperInstance = "m5.2xlarge"
	}
	if o.ControlPlaneHosts == 0 {
		o.ControlPlaneHosts = 3
	}
	if o.RegisterBatchPerS == 0 {
		o.RegisterBatchPerS = DefaultRegisterBatchPerS
	}
	if o.Routers == 0 {
		o.Routers = 100
	}
	if o.DynamoItemOverhead == 0 {
		o.DynamoItemOverhead = 20
	}
	if o.DynamoTargetUtil == 0 {
		o.DynamoTargetUtil = 0.7
	}
}

func ptr[T any](v T) *T { return &v }

// Validate checks the workload. Errors name the CLI flag of the field.
func (w Workload) Validate() error {
	var errs []error
	fail := func(format string, a ...any) { errs = append(errs, fmt.Errorf("plan: "+format, a...)) }
	pos := func(flag string, v float64) {
		if !(v > 0) || math.IsInf(v, 0) {
			fail("--%s %v: want a positive number", flag, v)
		}
	}
	pos("rps", w.RPS)
	pos("keys-per-request", w.KeysPerRequest)
	pos("item-size", w.ItemBytes)
	pos("pages", w.Pages)
	if !(w.UpdatesPerS >= 0) || math.IsInf(w.UpdatesPerS, 0) {
		fail("--updates-per-s %v: want zero or more", w.UpdatesPerS)
	}
	if w.Replicas < 1 {
		fail("--replicas %d: want at least 1", w.Replicas)
	}
	if w.Zones < 1 {
		fail("--zones %d: want at least 1", w.Zones)
	}
	// With 1 < zones < replicas some zone holds two replicas of a partition,
	// and whether a hedge crosses zones depends on which: the cross-AZ
	// accounting below does not hold, so refuse rather than guess.
	if w.Zones > 1 && w.Replicas > w.Zones {
		fail("--replicas %d > --zones %d: the model places a partition's replicas in distinct zones (one zone, --zones 1, is also supported)", w.Replicas, w.Zones)
	}
	if w.ItemBytes > dynamoMaxItem {
		fail("--item-size %v bytes: over DynamoDB's 400 KB item limit, so there is no like-for-like DynamoDB table to compare with", w.ItemBytes)
	}
	return errors.Join(errs...)
}

// Validate checks the options (defaults applied). Errors name the CLI flag.
func (o Options) Validate(w Workload) error {
	o.ensureDefaults()
	var errs []error
	fail := func(format string, a ...any) { errs = append(errs, fmt.Errorf("plan: "+format, a...)) }
	frac := func(flag string, v float64) {
		if !(v > 0 && v <= 1) {
			fail("--%s %v: want a fraction in (0,1]", flag, v)
		}
	}
	frac("nic-share", o.NICShare)
	frac("disk-fill", o.DiskFill)
	frac("cpu-target", o.CPUTarget)
	frac("dynamo-target-util", o.DynamoTargetUtil)
	if !(o.Compression > 0 && o.Compression <= 2) {
		fail("--compression %v: want stored/value bytes in (0,2]", o.Compression)
	}
	if !(o.KeysPerCoreS > 0) {
		fail("--keys-per-core %v: want a positive rate", o.KeysPerCoreS)
	}
	if !(o.LorryBatchesPerS >= 0) {
		fail("--lorry-batches-per-s %v: want zero (derive it) or a measured rate", o.LorryBatchesPerS)
	}
	if !(o.LorryRecordsPerCoreS > 0) {
		fail("--lorry-records-per-core %v: want a positive rate", o.LorryRecordsPerCoreS)
	}
	if o.RetainedVersions < 1 {
		fail("--retained-versions %d: want at least 1", o.RetainedVersions)
	}
	if h := *o.HedgeRate; !(h >= 0 && h <= 10) {
		fail("--hedge-rate %v: want extra sub-requests per primary in [0,10]", h)
	}
	if o.SameZoneFraction != nil {
		if f := *o.SameZoneFraction; !(f >= 0 && f <= 1) {
			fail("--same-zone %v: want a fraction in [0,1]", f)
		} else if w.Zones == 1 && f != 1 {
			fail("--same-zone %v with --zones 1: every request stays in the one zone", f)
		}
	}
	if o.Partitions < 1 {
		fail("--partitions %d: want at least 1", o.Partitions)
	}
	if r := *o.RebuildsPerMonth; !(r >= 0 && r <= 1000) {
		fail("--rebuilds-per-month %v: want zero or more", r)
	}
	if o.LorryBatchAge <= 0 {
		fail("--lorry-batch-age %v: want a positive duration", o.LorryBatchAge)
	}
	if o.ControlPlaneHosts < 1 || o.Routers < 1 {
		fail("--control-plane-hosts %d and --routers %d: want at least 1", o.ControlPlaneHosts, o.Routers)
	}
	if !(o.RegisterBatchPerS > 0) {
		fail("--register-capacity %v: want a positive rate", o.RegisterBatchPerS)
	}
	if !(o.DynamoItemOverhead >= 0) {
		fail("--dynamo-item-overhead %v: want zero or more bytes", o.DynamoItemOverhead)
	}
	return errors.Join(errs...)
}
