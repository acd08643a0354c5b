// Package layout holds the test that keeps the repository's layers apart.
//
// The module has three kinds of package:
//
//   - product packages: what a deployment runs and what users import
//     (pillar, jobs, subsets, sstbuilder, bulkexport, plan, lorry, cobbled
//     and everything under internal/ but the fixtures below);
//   - harnesses: benchmarks (bench/...), the demo (demo), the chaos suite
//     (chaos) and the bad-input suite (badinput). They measure and exercise
//     the product and may import any of it;
//   - the binary: cli and cmd/pillar, which wire everything, harnesses
//     included, into the `pillar` command.
//
// Invariants, checked by TestProductImportsNoHarness against `go list`:
//
//   - no product package's build (its transitive imports) contains a
//     harness, the binary, or the test fixture internal/testcluster;
//   - no product package's tests import a harness or the binary directly.
//     They may import internal/testcluster, a loopback cluster of real
//     nodes that the router's tests and the read benchmark share.
//
// The package has no code of its own.
package layout
