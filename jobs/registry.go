package jobs

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"sync"

	"go.ytsaurus.tech/yt/go/mapreduce"
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
