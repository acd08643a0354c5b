// Package bulkexport is the bulk-export protocol as one call: Run exports a
// Pillar store's published pair (jobs/pipeline.Export), builds one snapshot
// SST batch per partition (sstbuilder.BuildExport), uploads the batches to
// the object store and registers them with the control plane.
//
// Invariants:
//
//   - Every snapshot Run registers carries, in its manifest's Supersedes, the
//     export-queue end of its partition as of the export. The control plane
//     refuses a snapshot whose Supersedes is beyond the partition's newest
//     delivered delta (control.ErrNotDelivered); Run waits that out, on
//     Options.Clock, until Options.WaitDelivered has passed, then returns the
//     refusal. An export whose queue ends are missing is refused before any
//     build (ErrNoSupersedes): a snapshot must not escape ordering.
//   - Run is idempotent on retry. Options.Dir holds the export and the
//     build's resume state; a run that stopped at any step (crash, error,
//     cancellation) is completed by running it again with the same Dir and
//     ID, without a second export and without duplicate batches:
//   - export files written but not committed to the store: they are
//     discarded and the export is made again (the store recorded nothing);
//   - export committed (the store's export/last names this ID): not
//     exported again; the build resumes from its state;
//   - batches uploaded but not registered: registered (the control plane's
//     registration is idempotent by batch id and content).
//   - Export IDs are single-use: an ID whose files are gone but that the store
//     recorded as committed is refused, so that two different exports never
//     share batch ids.
//
// Run holds the store's operation lock only while exporting (as
// pipeline.Export does); building and registering do not block the store.
package bulkexport
