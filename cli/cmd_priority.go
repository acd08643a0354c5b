package cli

import "github.com/urfave/cli/v2"

// priorityFlag overrides the priority of the export records an operation
// queues (publish, rollback, subsets recompute).
var priorityFlag = &cli.StringFlag{Name: "priority", Usage: "priority of the queued export records, fresh or bulk " +
	"(default: fresh for a re-publish of the live pair and for subset recomputes, bulk for a new pair or a rollback); " +
	"Lorry delivers fresh records ahead of the bulk backlog"}
