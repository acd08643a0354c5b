package switchbench

import (
	"context"
	"strings"
	"testing"
)

// TestRun: a promote, a rollback and a roll-forward through the real
// control plane while readers run: no read fails, none mixes versions, and
// every switch completes (every read on the new live version). Times are
// reported, not asserted.
func TestRun(t *testing.T) {
	rep, err := Run(context.Background(), Options{Dir: t.TempDir(), Switches: 3})
	if err != nil {
		t.Fatal(err)
	}
	if rep.FailedReads != 0 || rep.MixedReads != 0 || rep.Reads == 0 || len(rep.Switches) != 3 {
		t.Fatalf("report %+v", rep)
	}
	kinds := rep.Switches[0].Kind + "," + rep.Switches[1].Kind + "," + rep.Switches[2].Kind
	if kinds != "promote,rollback,rollback" || rep.Switches[0].To != PubB || rep.Switches[1].To != PubA || rep.Switches[2].To != PubB {
		t.Fatalf("switches %+v", rep.Switches)
	}
	if md := rep.Markdown(); !strings.Contains(md, "promote") || !strings.Contains(md, "0 failed, 0 mixed") {
		t.Fatalf("markdown:\n%s", md)
	}
	t.Logf("\n%s", rep.Markdown())
}

// TestRunViaServer: the same through the router's gRPC server (the
// response names the version read).
func TestRunViaServer(t *testing.T) {
	rep, err := Run(context.Background(), Options{Dir: t.TempDir(), Switches: 2, ViaServer: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.FailedReads != 0 || rep.MixedReads != 0 || rep.Reads == 0 || len(rep.Switches) != 2 || !rep.ViaServer {
		t.Fatalf("report %+v", rep)
	}
}

func TestOptionsValidate(t *testing.T) {
	if err := (Options{Keys: 5000}).Validate(); err == nil || !strings.Contains(err.Error(), "Keys 5000") {
		t.Fatalf("Keys over the limit: %v", err)
	}
	if err := (Options{Readers: -1}).Validate(); err == nil || !strings.Contains(err.Error(), "Readers -1") {
		t.Fatalf("negative readers: %v", err)
	}
}

// BenchmarkSwitch measures the switch time after a promote or a rollback
// with readers running (3 closed-loop readers of 96 keys, 4 partitions × 3
// nodes). One iteration is one switch (the first a promote, then rollbacks
// back and forth). Reported: switch_ms_max, switch_ms_mean, promote_ms,
// failed_reads and mixed_reads (both must be 0).
//
//	go test -run '^$' -bench Switch -benchtime 20x ./bench/switchbench/
func BenchmarkSwitch(b *testing.B) {
	rep, err := Run(context.Background(), Options{Dir: b.TempDir(), Switches: b.N})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(ms(rep.Switches[0].Took), "promote_ms")
	b.ReportMetric(ms(rep.Max), "switch_ms_max")
	b.ReportMetric(ms(rep.Mean), "switch_ms_mean")
	b.ReportMetric(float64(rep.FailedReads), "failed_reads")
	b.ReportMetric(float64(rep.MixedReads), "mixed_reads")
	b.ReportMetric(float64(rep.Reads), "reads")
}
