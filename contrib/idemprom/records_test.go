package idemprom_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/contrib/idemprom"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// fakeCounter stands in for the operator plane's inspector: no store on this
// branch counts records by state yet.
type fakeCounter struct {
	calls   atomic.Int32
	counts  map[string]int64
	sampled bool
	err     error
	block   bool // wait for the context to end
}

func (f *fakeCounter) CountByState(ctx context.Context) (map[string]int64, bool, error) {
	f.calls.Add(1)
	if f.block {
		<-ctx.Done()
		return nil, false, ctx.Err()
	}
	return f.counts, f.sampled, f.err
}

// Record counts are read at scrape time, once per interval whatever the number of
// scrapes.
func TestRecordCounts(t *testing.T) {
	fc := &fakeCounter{counts: map[string]int64{"completed": 1200, "started": 3, "failed": 2}, sampled: true}
	_, reg := newMetrics(t, idemprom.WithStateCounter("orders", fc), idemprom.WithRecordInterval(time.Hour))
	want := `
# HELP idemkit_records Records by state, counted at scrape time.
# TYPE idemkit_records gauge
idemkit_records{scope="orders",state="completed"} 1200
idemkit_records{scope="orders",state="failed"} 2
idemkit_records{scope="orders",state="started"} 3
# HELP idemkit_records_sampled 1 when the record counts are those of a sample (the count stopped early), 0 when of every record.
# TYPE idemkit_records_sampled gauge
idemkit_records_sampled{scope="orders"} 1
`
	for i := 0; i < 3; i++ {
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "idemkit_records", "idemkit_records_sampled"); err != nil {
			t.Fatal(err)
		}
	}
	if n := fc.calls.Load(); n != 1 {
		t.Fatalf("%d counts for 3 scrapes within the interval, want 1", n)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %v", problems, err)
	}
}

// A count that fails or runs out of time is counted as an error, and the scrape
// shows no record counts rather than stale ones; the next scrape counts again.
func TestRecordCountErrors(t *testing.T) {
	failing := &fakeCounter{err: errors.New("connection refused")}
	slow := &fakeCounter{block: true}
	_, reg := newMetrics(t, idemprom.WithStateCounter("a", failing), idemprom.WithStateCounter("b", slow),
		idemprom.WithRecordInterval(0), idemprom.WithRecordTimeout(20*time.Millisecond))
	for i := 0; i < 2; i++ {
		if _, err := reg.Gather(); err != nil {
			t.Fatal(err)
		}
	}
	want := `
# HELP idemkit_record_count_errors_total Record counts that failed or ran out of time.
# TYPE idemkit_record_count_errors_total counter
idemkit_record_count_errors_total{scope="a"} 3
idemkit_record_count_errors_total{scope="b"} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "idemkit_record_count_errors_total", "idemkit_records"); err != nil {
		t.Fatal(err)
	}
	if failing.calls.Load() != 3 || slow.calls.Load() != 3 {
		t.Fatalf("counts %d and %d for 3 scrapes with interval 0, want 3 each", failing.calls.Load(), slow.calls.Load())
	}
}

// A panicking counter fails its count; the scrape goes on.
func TestRecordCounterPanics(t *testing.T) {
	f := idemprom.StateCounterFunc(func(context.Context) (map[string]int64, bool, error) { panic("bug") })
	_, reg := newMetrics(t, idemprom.WithStateCounter("p", f))
	want := `
# HELP idemkit_record_count_errors_total Record counts that failed or ran out of time.
# TYPE idemkit_record_count_errors_total counter
idemkit_record_count_errors_total{scope="p"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "idemkit_record_count_errors_total"); err != nil {
		t.Fatal(err)
	}
}
