package plan

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"net/url"
	"os"
	"sort"
	"time"

	"gopkg.in/yaml.v3"
)

// DefaultPricesFile is the path, relative to this package, of the price
// file Load falls back to; it is embedded in the binary, so planning needs
// no network and no file on disk.
const DefaultPricesFile = "testdata/prices-aws-us-east-1.yaml"

//go:embed testdata/prices-aws-us-east-1.yaml
var defaultPrices []byte

// Price is one published figure with where it comes from.
type Price struct {
	// Value in Prices.Currency per Unit.
	Value float64 `yaml:"value" json:"value"`
	// Unit says what Value is per ("GB-month", "million read request units").
	Unit string `yaml:"unit" json:"unit"`
	// Date is when the figure was checked against Source (YYYY-MM-DD).
	Date string `yaml:"date" json:"date"`
	// Source is the public page that publishes the figure.
	Source string `yaml:"source" json:"source"`
	// SeenAt lists the pages the number was actually read from, when the
	// official page does not show it in plain text (AWS price pages fill
	// their tables by script).
	SeenAt []string `yaml:"seen_at,omitempty" json:"seen_at,omitempty"`
	// Note: caveats, tiers, conflicting figures.
	Note string `yaml:"note,omitempty" json:"note,omitempty"`
}

// Instance is an EC2 instance type a node, a control-plane host or a Lorry
// worker can run on.
type Instance struct {
	Hourly      Price   `yaml:"hourly" json:"hourly"`
	VCPUs       int     `yaml:"vcpus" json:"vcpus"`
	MemoryGiB   float64 `yaml:"memory_gib" json:"memory_gib"`
	DiskGB      float64 `yaml:"disk_gb" json:"disk_gb"`           // local NVMe, decimal GB; 0 for EBS-only types
	NetworkGbps float64 `yaml:"network_gbps" json:"network_gbps"` // baseline (sustained), not the "up to" burst
	SpecSource  string  `yaml:"spec_source" json:"spec_source"`
	SpecNote    string  `yaml:"spec_note,omitempty" json:"spec_note,omitempty"`
}

// DynamoDBPrices are the DynamoDB Standard table class figures.
type DynamoDBPrices struct {
	OnDemandReadPerMillion  Price `yaml:"on_demand_read_per_million" json:"on_demand_read_per_million"`
	OnDemandWritePerMillion Price `yaml:"on_demand_write_per_million" json:"on_demand_write_per_million"`
	ProvisionedRCUHour      Price `yaml:"provisioned_rcu_hour" json:"provisioned_rcu_hour"`
	ProvisionedWCUHour      Price `yaml:"provisioned_wcu_hour" json:"provisioned_wcu_hour"`
	StorageGBMonth          Price `yaml:"storage_gb_month" json:"storage_gb_month"`
}

// S3Prices are the S3 Standard figures.
type S3Prices struct {
	StorageGBMonth Price `yaml:"storage_gb_month" json:"storage_gb_month"`
	PutPer1000     Price `yaml:"put_per_1000" json:"put_per_1000"`
	GetPer1000     Price `yaml:"get_per_1000" json:"get_per_1000"`
}

// TransferPrices are data-transfer figures.
type TransferPrices struct {
	// InterAZPerGBEachDirection is charged on the sending and on the
	// receiving side, so one GB crossing zones costs twice this.
	InterAZPerGBEachDirection Price `yaml:"inter_az_per_gb_each_direction" json:"inter_az_per_gb_each_direction"`
}

// Prices is a price file.
type Prices struct {
	Region        string              `yaml:"region" json:"region"`
	Currency      string              `yaml:"currency" json:"currency"`
	HoursPerMonth float64             `yaml:"hours_per_month" json:"hours_per_month"`
	DynamoDB      DynamoDBPrices      `yaml:"dynamodb" json:"dynamodb"`
	S3            S3Prices            `yaml:"s3" json:"s3"`
	Transfer      TransferPrices      `yaml:"transfer" json:"transfer"`
	Instances     map[string]Instance `yaml:"instances" json:"instances"`

	// File is where the prices were read from ("" for the embedded default).
	File string `yaml:"-" json:"file"`
}

// DefaultPrices returns the embedded price file.
func DefaultPrices() (*Prices, error) {
	p, err := ParsePrices(defaultPrices, DefaultPricesFile)
	if err != nil {
		return nil, err
	}
	p.File = ""
	return p, nil
}

// LoadPrices reads a price file (YAML; JSON is YAML too). An empty path
// returns DefaultPrices.
func LoadPrices(path string) (*Prices, error) {
	if path == "" {
		return DefaultPrices()
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("plan: prices: %w", err)
	}
	return ParsePrices(b, path)
}

// ParsePrices decodes and validates a price file; name is used in errors.
// Unknown fields are errors (a misspelt price must not silently fall back
// to zero).
func ParsePrices(b []byte, name string) (*Prices, error) {
	var p Prices
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("plan: prices %s: %w", name, err)
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("plan: prices %s: %w", name, err)
	}
	p.File = name
	return &p, nil
}

// Validate checks every figure: a value that is a finite non-negative
// number, a unit, a date (YYYY-MM-DD) and an http(s) source; every
// instance has positive vCPUs and network bandwidth.
func (p *Prices) Validate() error {
	var errs []error
	fail := func(field, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{field}, a...)...))
	}
	if p.Currency == "" {
		fail("currency", "missing")
	}
	if !(p.HoursPerMonth > 0 && p.HoursPerMonth <= 744) {
		fail("hours_per_month", "%v: want hours in a month (AWS bills 730)", p.HoursPerMonth)
	}
	for _, f := range []struct {
		name string
		p    Price
	}{
		{"dynamodb.on_demand_read_per_million", p.DynamoDB.OnDemandReadPerMillion},
		{"dynamodb.on_demand_write_per_million", p.DynamoDB.OnDemandWritePerMillion},
		{"dynamodb.provisioned_rcu_hour", p.DynamoDB.ProvisionedRCUHour},
		{"dynamodb.provisioned_wcu_hour", p.DynamoDB.ProvisionedWCUHour},
		{"dynamodb.storage_gb_month", p.DynamoDB.StorageGBMonth},
		{"s3.storage_gb_month", p.S3.StorageGBMonth},
		{"s3.put_per_1000", p.S3.PutPer1000},
		{"s3.get_per_1000", p.S3.GetPer1000},
		{"transfer.inter_az_per_gb_each_direction", p.Transfer.InterAZPerGBEachDirection},
	} {
		if err := f.p.validate(); err != nil {
			fail(f.name, "%v", err)
		}
	}
	if len(p.Instances) == 0 {
		fail("instances", "missing (want at least the node instance type)")
	}
	names := make([]string, 0, len(p.Instances))
	for n := range p.Instances {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		in := p.Instances[n]
		field := "instances." + n
		if err := in.Hourly.validate(); err != nil {
			fail(field+".hourly", "%v", err)
		}
		if in.VCPUs <= 0 {
			fail(field+".vcpus", "%d: want a positive count", in.VCPUs)
		}
		if !(in.NetworkGbps > 0) {
			fail(field+".network_gbps", "%v: want the positive baseline bandwidth", in.NetworkGbps)
		}
		if in.DiskGB < 0 || in.MemoryGiB < 0 {
			fail(field, "disk_gb %v and memory_gib %v must not be negative", in.DiskGB, in.MemoryGiB)
		}
		if err := checkURL(in.SpecSource); err != nil {
			fail(field+".spec_source", "%v", err)
		}
	}
	return errors.Join(errs...)
}

func (p Price) validate() error {
	var errs []error
	if p.Source == "" && p.Value == 0 && p.Date == "" {
		return errors.New("missing")
	}
	if !(p.Value >= 0) || p.Value > 1e9 { // also catches NaN
		errs = append(errs, fmt.Errorf("value %v: want a non-negative price", p.Value))
	}
	if p.Unit == "" {
		errs = append(errs, errors.New("unit: missing"))
	}
	if _, err := time.Parse(time.DateOnly, p.Date); err != nil {
		errs = append(errs, fmt.Errorf("date %q: want YYYY-MM-DD", p.Date))
	}
	if err := checkURL(p.Source); err != nil {
		errs = append(errs, fmt.Errorf("source: %w", err))
	}
	return errors.Join(errs...)
}

func checkURL(s string) error {
	if s == "" {
		return errors.New("missing (want the public page's URL)")
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return fmt.Errorf("%q: want an http(s) URL", s)
	}
	return nil
}

// Instance returns the named instance type or an error naming field.
func (p *Prices) Instance(field, name string) (Instance, error) {
	in, ok := p.Instances[name]
	if !ok {
		names := make([]string, 0, len(p.Instances))
		for n := range p.Instances {
			names = append(names, n)
		}
		sort.Strings(names)
		return Instance{}, fmt.Errorf("plan: %s %q: not in the price file (have %v)", field, name, names)
	}
	return in, nil
}
