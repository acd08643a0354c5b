// Command pillar-job is the job binary of the toolkit's YTsaurus operations:
// the YT runner uploads it and exec nodes run it as
// "./go-binary -job <type> -output-pipes <n>". It links every registered job
// (package jobs and the packages that register jobs into it) and no cgo, so
// it runs on any exec node:
//
//	CGO_ENABLED=0 go build -o bin/pillar-job ./jobs/cmd/pillar-job
//
// Run by hand (outside a job) it lists the jobs it carries.
package main

import (
	"fmt"
	"os"

	"go.ytsaurus.tech/yt/go/mapreduce"

	"github.com/pillarkit/pillar/jobs"
	_ "github.com/pillarkit/pillar/jobs/pipeline" // rechunk, embed
)

func main() {
	if mapreduce.InsideJob() {
		os.Exit(mapreduce.JobMain())
	}
	fmt.Fprintln(os.Stderr, "pillar-job: the job binary of pillar's YTsaurus operations; exec nodes run it (YT_JOB_ID is not set).")
	fmt.Fprintln(os.Stderr, "jobs it carries:")
	for _, e := range jobs.Registered() {
		fmt.Fprintf(os.Stderr, "  %-12s %T  %s\n", e.Name, e.Job, e.Usage)
	}
	os.Exit(2)
}
