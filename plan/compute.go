package plan

import (
	"fmt"
	"math"
)

// Need is one of the serving tier's sizing constraints.
type Need struct {
	Name    string  `json:"name"`     // egress, storage, cpu, replicas
	Nodes   int     `json:"nodes"`    // nodes this need alone asks for
	Demand  float64 `json:"demand"`   // bytes/s, bytes or key reads/s the tier must carry
	PerNode float64 `json:"per_node"` // what one node offers of it
	Unit    string  `json:"unit"`
}

// Line is one item of a monthly bill.
type Line struct {
	Item    string  `json:"item"`
	Monthly float64 `json:"monthly"`
	Detail  string  `json:"detail"`
}

// Serving sizes the cobbled tier.
type Serving struct {
	Instance string `json:"instance"`
	// Nodes is the largest need, rounded up to a multiple of Zones so every
	// zone holds the same number of nodes.
	Nodes int    `json:"nodes"`
	Limit string `json:"limit"` // the need that decided Nodes
	Needs []Need `json:"needs"`
}

// CrossAZ is the serving traffic that crosses zones.
type CrossAZ struct {
	SameZoneFraction float64 `json:"same_zone_fraction"`
	HedgeRate        float64 `json:"hedge_rate"`
	// CrossFraction is cross-zone answer bytes over primary answer bytes:
	// (1 − SameZoneFraction) + HedgeRate (every hedge or failover goes to
	// a replica in another zone), 0 with one zone.
	CrossFraction float64 `json:"cross_fraction"`
	BytesPerS     float64 `json:"bytes_per_s"`
	GBMonth       float64 `json:"gb_month"`
}

// ObjectStore is the batch flow's S3 use.
type ObjectStore struct {
	SnapshotBytes    float64 `json:"snapshot_bytes"`      // one full rebuild's SST bytes
	StoredBytes      float64 `json:"stored_bytes"`        // retained snapshots + deltas since the last one (mean)
	FilesPerRebuild  float64 `json:"files_per_rebuild"`   // SST files of one rebuild
	LorryBatchesPerS float64 `json:"lorry_batches_per_s"` // delta batches registered per second
	PutsPerMonth     float64 `json:"puts_per_month"`
	GetsPerMonth     float64 `json:"gets_per_month"`
	RebuildsPerMonth float64 `json:"rebuilds_per_month"`
	DeltaBytesPerS   float64 `json:"delta_bytes_per_s"`
}

// ControlPlane is the control plane's load.
type ControlPlane struct {
	RegisterPerS       float64 `json:"register_per_s"`        // RegisterBatch calls
	BatchPollsPerS     float64 `json:"batch_polls_per_s"`     // long-poll answers to replicas (one per replica per batch)
	HeartbeatsPerS     float64 `json:"heartbeats_per_s"`      // node heartbeats
	RoutingFetchesPerS float64 `json:"routing_fetches_per_s"` // routers' table fetches
	// RegisterUtilisation is RegisterPerS over the measured capacity.
	RegisterUtilisation float64 `json:"register_utilisation"`
	Hosts               int     `json:"hosts"`
}

// LorryWorkers sizes Lorry.
type LorryWorkers struct {
	Cores   float64 `json:"cores"`
	Workers int     `json:"workers"`
}

// DynamoDB is the same workload on DynamoDB.
type DynamoDB struct {
	ItemBytes          float64 `json:"item_bytes"` // billed item size (value + attribute names + key)
	ReadUnitsPerItem   float64 `json:"read_units_per_item"`
	WriteUnitsPerItem  float64 `json:"write_units_per_item"`
	StronglyConsistent bool    `json:"strongly_consistent"`
	ReadsPerS          float64 `json:"reads_per_s"`
	WritesPerS         float64 `json:"writes_per_s"`
	// BatchGetItem calls per request: at most 100 items and 16 MB each.
	CallsPerRequest float64 `json:"batch_get_calls_per_request"`
	CallsPerS       float64 `json:"batch_get_calls_per_s"`
	StorageGB       float64 `json:"storage_gb"`
	RCU             float64 `json:"provisioned_rcu"`
	WCU             float64 `json:"provisioned_wcu"`

	OnDemand           []Line  `json:"on_demand"`
	OnDemandMonthly    float64 `json:"on_demand_monthly"`
	Provisioned        []Line  `json:"provisioned"`
	ProvisionedMonthly float64 `json:"provisioned_monthly"`
}

// Result is a plan.
type Result struct {
	Workload     Workload     `json:"workload"`
	Options      Options      `json:"options"`
	Currency     string       `json:"currency"`
	PricesFile   string       `json:"prices_file"`
	Serving      Serving      `json:"serving"`
	CrossAZ      CrossAZ      `json:"cross_az"`
	ObjectStore  ObjectStore  `json:"object_store"`
	ControlPlane ControlPlane `json:"control_plane"`
	Lorry        LorryWorkers `json:"lorry"`

	Pillar        []Line   `json:"pillar"`
	PillarMonthly float64  `json:"pillar_monthly"`
	DynamoDB      DynamoDB `json:"dynamodb"`
	// Ratios: Pillar's monthly cost over DynamoDB's.
	RatioOnDemand    float64  `json:"ratio_on_demand"`
	RatioProvisioned float64  `json:"ratio_provisioned"`
	Warnings         []string `json:"warnings,omitempty"`
}

// ceil rounds up, forgiving floating-point dust just above an integer.
func ceil(x float64) float64 { return math.Ceil(x - 1e-9) }

// Compute plans the workload under the options and prices. It is pure: no
// I/O, no clock.
func Compute(w Workload, o Options, p *Prices) (*Result, error) {
	if err := w.Validate(); err != nil {
		return nil, err
	}
	o.ensureDefaults()
	if err := o.Validate(w); err != nil {
		return nil, err
	}
	node, err := p.Instance("--instance", o.Instance)
	if err != nil {
		return nil, err
	}
	if node.DiskGB <= 0 {
		return nil, fmt.Errorf("plan: --instance %q: no local disk in the price file (disk_gb); cobbled keeps RocksDB on local NVMe", o.Instance)
	}
	helper, err := p.Instance("--helper-instance", o.HelperInstance)
	if err != nil {
		return nil, err
	}
	r := &Result{Workload: w, Options: o, Currency: p.Currency, PricesFile: p.File}
	if r.PricesFile == "" {
		r.PricesFile = "(built in) plan/" + DefaultPricesFile
	}
	secs := p.HoursPerMonth * 3600
	h := *o.HedgeRate
	R, Z, P := float64(w.Replicas), float64(w.Zones), float64(o.Partitions)
	stored := w.ItemBytes*o.Compression + perEntryBytes // per key, on disk and in S3

	// Serving nodes: the largest of three needs.
	keyReads := w.RPS * w.KeysPerRequest
	answer := keyReads * (w.ItemBytes + perKeyWireBytes) // primary answer bytes/s
	egress := answer * (1 + h)
	nic := node.NetworkGbps * 1e9 / 8 * o.NICShare
	disk := node.DiskGB * 1e9 * o.DiskFill
	data := R * float64(o.RetainedVersions) * w.Pages * stored
	cpu := keyReads * (1 + h)
	perNodeCPU := o.KeysPerCoreS * float64(node.VCPUs) * o.CPUTarget
	needs := []Need{
		{Name: "egress", Nodes: int(ceil(egress / nic)), Demand: egress, PerNode: nic, Unit: "bytes/s"},
		{Name: "storage", Nodes: int(ceil(data / disk)), Demand: data, PerNode: disk, Unit: "bytes"},
		{Name: "cpu", Nodes: int(ceil(cpu / perNodeCPU)), Demand: cpu, PerNode: perNodeCPU, Unit: "key reads/s"},
		{Name: "replicas", Nodes: w.Replicas, Demand: R, PerNode: 1, Unit: "distinct nodes"},
	}
	best := needs[0]
	for _, n := range needs[1:] {
		if n.Nodes > best.Nodes {
			best = n
		}
	}
	nodes := best.Nodes
	if rem := nodes % w.Zones; rem != 0 {
		nodes += w.Zones - rem
	}
	r.Serving = Serving{Instance: o.Instance, Nodes: nodes, Limit: best.Name, Needs: needs}

	// Cross-AZ answer bytes.
	f := 1.0
	if w.Zones > 1 {
		f = math.Min(1, R/Z)
	}
	if o.SameZoneFraction != nil {
		f = *o.SameZoneFraction
	}
	cross := 0.0
	if w.Zones > 1 {
		cross = (1 - f) + h
	}
	r.CrossAZ = CrossAZ{SameZoneFraction: f, HedgeRate: h, CrossFraction: cross, BytesPerS: answer * cross}
	r.CrossAZ.GBMonth = r.CrossAZ.BytesPerS * secs / gib

	// Object store: snapshot rebuilds and Lorry's delta batches.
	rb := *o.RebuildsPerMonth
	snap := w.Pages * stored
	perPart := snap / P
	filesPerPart := math.Max(1, ceil(perPart/sstTargetFile))
	fileBytes := perPart / filesPerPart
	partsPerFile := math.Max(1, ceil(fileBytes/s3PartSize))
	putsPerFile := partsPerFile
	if partsPerFile > 1 {
		putsPerFile += 2 // CreateMultipartUpload + CompleteMultipartUpload
	}
	files := P * filesPerPart
	putsRebuild := files*putsPerFile + P // + one manifest per partition
	getsRebuild := R * (files + P)       // every replica reads every file and manifest with one GET (objstore.S3.Get streams)
	deltaBytes := w.UpdatesPerS * stored
	age := o.LorryBatchAge.Seconds()
	// A partition closes a batch every MaxBatchAge when at least one record
	// arrived (Poisson arrivals over P partitions), and also every
	// MaxBatchBytes of values.
	batches := P/age*(1-math.Exp(-w.UpdatesPerS*age/P)) + deltaBytes/lorryBatchBytes
	if o.LorryBatchesPerS > 0 {
		batches = o.LorryBatchesPerS
	}
	interval := secs
	if rb > 0 {
		interval = math.Min(secs, secs/rb)
	} else if w.UpdatesPerS > 0 {
		r.Warnings = append(r.Warnings, "no snapshot rebuilds: delta batches accumulate in the object store; the plan counts one month of them")
	}
	r.ObjectStore = ObjectStore{
		SnapshotBytes:    snap,
		StoredBytes:      float64(o.RetainedVersions)*snap + deltaBytes*interval/2,
		FilesPerRebuild:  files,
		LorryBatchesPerS: batches,
		PutsPerMonth:     rb*putsRebuild + batches*2*secs, // a delta batch: one SST + its manifest
		GetsPerMonth:     rb*getsRebuild + batches*2*R*secs,
		RebuildsPerMonth: rb,
		DeltaBytesPerS:   deltaBytes,
	}

	// Control plane.
	reg := batches + rb*P/secs
	r.ControlPlane = ControlPlane{
		RegisterPerS:        reg,
		BatchPollsPerS:      reg * R,
		HeartbeatsPerS:      float64(nodes) / nodeHeartbeat.Seconds(),
		RoutingFetchesPerS:  float64(o.Routers) / routingRefresh.Seconds(),
		RegisterUtilisation: reg / o.RegisterBatchPerS,
		Hosts:               o.ControlPlaneHosts,
	}
	if u := r.ControlPlane.RegisterUtilisation; u > 0.8 {
		r.Warnings = append(r.Warnings, fmt.Sprintf("control plane: %.0f RegisterBatch/s is %.0f%% of the %.0f/s measured on PostgreSQL; raise --lorry-batch-age (fewer, larger delta batches) or lower --partitions",
			reg, 100*u, o.RegisterBatchPerS))
	}

	// Lorry workers.
	lc := w.UpdatesPerS / o.LorryRecordsPerCoreS
	lw := int(ceil(lc / (float64(helper.VCPUs) * o.CPUTarget)))
	if w.UpdatesPerS > 0 && lw < 1 {
		lw = 1
	}
	r.Lorry = LorryWorkers{Cores: lc, Workers: lw}

	// Pillar's bill.
	hours := p.HoursPerMonth
	s3gb := r.ObjectStore.StoredBytes / gib
	r.Pillar = []Line{
		{"serving nodes", float64(nodes) * node.Hourly.Value * hours,
			fmt.Sprintf("%d × %s at %s/h (limit: %s)", nodes, o.Instance, money(node.Hourly.Value), best.Name)},
		{"cross-AZ transfer", r.CrossAZ.GBMonth * 2 * p.Transfer.InterAZPerGBEachDirection.Value,
			fmt.Sprintf("%s GB/month × 2 sides × %s/GB", num(r.CrossAZ.GBMonth), money(p.Transfer.InterAZPerGBEachDirection.Value))},
		{"object store: storage", s3gb * p.S3.StorageGBMonth.Value,
			fmt.Sprintf("%s GB-month (%d retained snapshots + deltas)", num(s3gb), o.RetainedVersions)},
		{"object store: requests", r.ObjectStore.PutsPerMonth/1000*p.S3.PutPer1000.Value + r.ObjectStore.GetsPerMonth/1000*p.S3.GetPer1000.Value,
			fmt.Sprintf("%s PUT + %s GET per month", num(r.ObjectStore.PutsPerMonth), num(r.ObjectStore.GetsPerMonth))},
		{"control plane", float64(o.ControlPlaneHosts) * helper.Hourly.Value * hours,
			fmt.Sprintf("%d × %s", o.ControlPlaneHosts, o.HelperInstance)},
		{"Lorry workers", float64(lw) * helper.Hourly.Value * hours,
			fmt.Sprintf("%d × %s for %s records/s", lw, o.HelperInstance, num(w.UpdatesPerS))},
	}
	for _, l := range r.Pillar {
		r.PillarMonthly += l.Monthly
	}

	r.DynamoDB = dynamo(w, o, p)
	r.RatioOnDemand = r.PillarMonthly / r.DynamoDB.OnDemandMonthly
	r.RatioProvisioned = r.PillarMonthly / r.DynamoDB.ProvisionedMonthly
	return r, nil
}

// ReadUnits is what one read of an item of size bytes consumes: its size
// rounded up to 4 KB units, halved when eventually consistent.
func ReadUnits(size float64, strong bool) float64 {
	u := math.Max(1, ceil(size/dynamoReadUnit))
	if !strong {
		return u / 2
	}
	return u
}

// WriteUnits is what one standard write of an item of size bytes consumes:
// its size rounded up to 1 KB units.
func WriteUnits(size float64) float64 { return math.Max(1, ceil(size/dynamoWriteUnit)) }

// BatchGetCalls is how many BatchGetItem calls fetch keys items of size
// bytes: at most 100 items and 16 MB per call.
func BatchGetCalls(keys, size float64) float64 {
	k := ceil(keys)
	return math.Max(ceil(k/dynamoBatchItems), ceil(k*size/dynamoBatchBytes))
}

func dynamo(w Workload, o Options, p *Prices) DynamoDB {
	secs := p.HoursPerMonth * 3600
	size := w.ItemBytes + o.DynamoItemOverhead
	d := DynamoDB{
		ItemBytes:          size,
		ReadUnitsPerItem:   ReadUnits(size, o.StronglyConsistent),
		WriteUnitsPerItem:  WriteUnits(size),
		StronglyConsistent: o.StronglyConsistent,
		ReadsPerS:          w.RPS * w.KeysPerRequest,
		WritesPerS:         w.UpdatesPerS,
		CallsPerRequest:    BatchGetCalls(w.KeysPerRequest, size),
		StorageGB:          w.Pages * (size + dynamoIndexBytes) / gib,
	}
	d.CallsPerS = w.RPS * d.CallsPerRequest
	rb := *o.RebuildsPerMonth
	rru := d.ReadsPerS * d.ReadUnitsPerItem // read units per second
	wru := d.WritesPerS * d.WriteUnitsPerItem
	rebuildWU := rb * w.Pages * d.WriteUnitsPerItem // write units per month for full rewrites
	storage := Line{"storage", d.StorageGB * p.DynamoDB.StorageGBMonth.Value,
		fmt.Sprintf("%s GB (value + %v B + 100 B index overhead per item)", num(d.StorageGB), o.DynamoItemOverhead)}
	consistency := "eventually consistent"
	if o.StronglyConsistent {
		consistency = "strongly consistent"
	}
	od := p.DynamoDB.OnDemandReadPerMillion.Value
	ow := p.DynamoDB.OnDemandWritePerMillion.Value
	d.OnDemand = []Line{
		{"reads", rru * secs / 1e6 * od, fmt.Sprintf("%s items/s × %v RRU (%s, %s B rounded up to 4 KB)", num(d.ReadsPerS), d.ReadUnitsPerItem, consistency, num(size))},
		{"writes", wru * secs / 1e6 * ow, fmt.Sprintf("%s items/s × %v WRU (1 KB units)", num(d.WritesPerS), d.WriteUnitsPerItem)},
		{"rebuild rewrites", rebuildWU / 1e6 * ow, fmt.Sprintf("%v × %s items × %v WRU", rb, num(w.Pages), d.WriteUnitsPerItem)},
		storage,
	}
	util := o.DynamoTargetUtil
	d.RCU = ceil(rru / util)
	d.WCU = ceil(wru / util)
	hr := p.HoursPerMonth
	pr := p.DynamoDB.ProvisionedRCUHour.Value
	pw := p.DynamoDB.ProvisionedWCUHour.Value
	d.Provisioned = []Line{
		{"reads", d.RCU * hr * pr, fmt.Sprintf("%s RCU (%.0f%% target utilisation) × %v h", num(d.RCU), 100*util, hr)},
		{"writes", d.WCU * hr * pw, fmt.Sprintf("%s WCU × %v h", num(d.WCU), hr)},
		{"rebuild rewrites", rebuildWU / 3600 / util * pw, fmt.Sprintf("%s WCU-hours, capacity raised for the rewrite", num(rebuildWU/3600/util))},
		storage,
	}
	for _, l := range d.OnDemand {
		d.OnDemandMonthly += l.Monthly
	}
	for _, l := range d.Provisioned {
		d.ProvisionedMonthly += l.Monthly
	}
	return d
}
