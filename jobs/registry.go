package jobs

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"sync"

	"go.ytsaurus.tech/yt/go/mapreduce"

	"github.com/pillarkit/pillar/pillar"
)

// Entry is a registered job: a name for the CLI and the job's type.
type Entry struct {
	Name  string
	Usage string
	// Job is a zero value of the job (a pointer to its struct).
	Job mapreduce.Job
}

var (
	catalogMu sync.Mutex
	catalog   = map[string]Entry{}
)

// Register makes a job type known under name: to the SDK and gob (so it can
// travel to a job process: mapreduce.Register) and to the CLI (pillar jobs
// list/run). job must be a pointer to a struct, e.g. &WordCountMapper{}.
// Call it from an init function of the package that defines the job, which
// the job binary (jobs/cmd/pillar-job) must import. Registering a name twice
// panics.
func Register(name, usage string, job mapreduce.Job) {
	catalogMu.Lock()
	defer catalogMu.Unlock()
	if _, dup := catalog[name]; dup {
		panic(fmt.Sprintf("jobs: job %q registered twice", name))
	}
	mapreduce.Register(job)
	catalog[name] = Entry{Name: name, Usage: usage, Job: job}
}

// Registered lists the registered jobs by name.
func Registered() []Entry {
	catalogMu.Lock()
	defer catalogMu.Unlock()
	out := make([]Entry, 0, len(catalog))
	for _, e := range catalog {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// New returns a fresh job of a registered name, its exported fields set
// from params (a JSON object; empty means none).
func New(name string, params []byte) (mapreduce.Job, error) {
	catalogMu.Lock()
	e, ok := catalog[name]
	catalogMu.Unlock()
	if !ok {
		return nil, fmt.Errorf("jobs: no job named %q (see pillar jobs list)", name)
	}
	v := reflect.New(reflect.TypeOf(e.Job).Elem())
	if len(params) > 0 {
		if err := json.Unmarshal(params, v.Interface()); err != nil {
			return nil, fmt.Errorf("jobs: job %q: params: %w", name, err)
		}
	}
	return v.Interface().(mapreduce.Job), nil
}

var rowTypes = map[string]any{
	"doc":           pillar.Doc{},
	"signal":        pillar.Signal{},
	"chunk":         pillar.Chunk{},
	"embedding":     pillar.Embedding{},
	"subset_member": pillar.SubsetMember{},
	"word_count":    WordCount{},
	"doc_words":     DocWords{},
}

// RegisterRowType names a row type for the CLI (pillar jobs sort
// --row-type). Registering a name twice panics.
func RegisterRowType(name string, row any) {
	catalogMu.Lock()
	defer catalogMu.Unlock()
	if _, dup := rowTypes[name]; dup {
		panic(fmt.Sprintf("jobs: row type %q registered twice", name))
	}
	rowTypes[name] = row
}

// RowType returns the row type registered under name.
func RowType(name string) (any, bool) {
	catalogMu.Lock()
	defer catalogMu.Unlock()
	v, ok := rowTypes[name]
	return v, ok
}

// RowTypeNames lists the registered row type names.
func RowTypeNames() []string {
	catalogMu.Lock()
	defer catalogMu.Unlock()
	out := make([]string, 0, len(rowTypes))
	for n := range rowTypes {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Params describes the exported fields of a job (its parameters) as
// "Name type" strings.
func Params(job mapreduce.Job) []string {
	t := reflect.TypeOf(job)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var out []string
	for i := 0; i < t.NumField(); i++ {
		if f := t.Field(i); f.IsExported() && !f.Anonymous {
			out = append(out, f.Name+" "+f.Type.String())
		}
	}
	return out
}
