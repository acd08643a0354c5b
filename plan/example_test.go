package plan_test

import (
	"fmt"
	"log"

	"github.com/pillarkit/pillar/plan"
)

// ExampleCompute sizes a serving tier for 200k BatchGet/s of 12.5 keys ×
// 50 KB over 2 billion pages, three replicas in three zones, with the
// built-in price file, and compares its monthly cost with DynamoDB's.
// `pillar plan` prints the same with every line item.
func ExampleCompute() {
	prices, err := plan.DefaultPrices()
	if err != nil {
		log.Fatal(err)
	}
	w := plan.Workload{RPS: 200000, KeysPerRequest: 12.5, ItemBytes: 50000, Pages: 2e9, UpdatesPerS: 5000, Replicas: 3, Zones: 3}
	r, err := plan.Compute(w, plan.Options{}, prices)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d × %s, sized by %s\n", r.Serving.Nodes, r.Serving.Instance, r.Serving.Limit)
	fmt.Println("nodes a multiple of the zones:", r.Serving.Nodes%w.Zones == 0)
	fmt.Println("cheaper than DynamoDB on demand:", r.RatioOnDemand < 1)
	// Output:
	// 231 × i4i.4xlarge, sized by storage
	// nodes a multiple of the zones: true
	// cheaper than DynamoDB on demand: true
}
