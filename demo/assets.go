package demo

import (
	_ "embed"

	"github.com/pillarkit/pillar/subsets"
)

// defaultPolicies is the demo's policy file, embedded so that `pillar demo`
// works from any folder.
//
//go:embed assets/policies.yaml
var defaultPolicies []byte

// DefaultPoliciesName names the embedded policy file in messages.
const DefaultPoliciesName = "(embedded) demo/assets/policies.yaml"

// loadPolicies reads path, or the embedded policies when path is "".
func loadPolicies(path string) (*subsets.Set, error) {
	if path == "" {
		return subsets.Parse(DefaultPoliciesName, defaultPolicies)
	}
	return subsets.ReadFile(path)
}
