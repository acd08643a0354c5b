// Package ytfake is a FAKE YTsaurus cluster: a yt.Client (go.ytsaurus.tech/yt/go
// v0.0.33) that keeps Cypress in memory and runs operations by executing
// their jobs — the real job binary — through the emulated exec node
// (jobs/internal/exechost). It exists only because no cluster can run on
// the machines the tests run on; the tests that count against YTsaurus
// itself are the YT_PROXY ones (see docs/ytsaurus.md). It is shared by the
// ytstore and jobs tests; nothing outside tests imports it.
//
// It is strict where the Pillar code depends on YTsaurus behaviour, and
// each rule below is checked against the SDK source or the YTsaurus
// documentation, cited at the code that enforces it ("docs:" paths are
// in github.com/ytsaurus/ytsaurus, yt/docs/en/_includes/user-guide/…):
//
//   - Cypress: map, document, table and file nodes with @id, @type,
//     @revision, @content_revision and user attributes; a create without
//     Recursive fails with a resolve error (code 500) when the parent is
//     missing, with code 501 when the node exists; opaque map nodes;
//     "#<id>" paths; revisions move on every change, content revisions on
//     changes of content only.
//   - Master transactions: nested transactions (a commit merges into the
//     parent, an abort aborts the descendants); implicit locks on every
//     write (exclusive for an overwrite, a remove or a value set; shared
//     with child_key for a create or remove in a map node, with
//     attribute_key for an attribute set; shared for an append); explicit
//     and waitable locks; snapshot locks that pin the node for the
//     transaction; lock conflicts fail with the real codes (402, 401, 400);
//     a transaction whose pings stop (StopPings: the client died) is
//     aborted once its timeout passes on Options.Now, and one begun with a
//     context is aborted when the context ends, as the SDK's is.
//   - Tables: schemas are enforced on every write (strict schemas refuse
//     unknown columns; required columns; column types), rows written to a
//     table with key columns must be sorted (code 301), also across an
//     append; append (<append=%true>) vs overwrite; alter_table of a
//     static table's schema (any while empty, on rows only appended
//     optional columns; code 316 otherwise; it takes the exclusive lock).
//   - Operations: map, reduce, map_reduce, sort and merge. Jobs are the
//     spec's command run by exechost in a fresh sandbox with the spec's
//     files, environment and secure vault, YSON on stdin (the only format
//     the fake speaks: any other fails the operation). A reduce needs
//     inputs sorted by its sort_by (the schema's key columns); outputs are
//     written in a nested output transaction under the operation's
//     transaction with the implicit locks, validated against the output
//     table's schema and the path's sorted_by; a failed operation leaves
//     nothing. Failure injection (FailJobs, AbortOperations, Hold) makes the
//     failure branches testable.
//
// What it does not model: ACLs, accounts and quotas, dynamic tables,
// chunks (a table is one chunk), row and key weight limits, retries.
//
// Concurrency: a Cluster may be used from many goroutines; jobs run
// without the cluster's lock held. Knobs (exported fields) are set before
// the calls they affect.
package ytfake
