package dynamodb

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
)

// TestTakeoverSeesTheCountMark: a takeover decided on a read of a claim not yet
// counted is refused when the owner marked the claim counted after that read
// (its handler started meanwhile); the next round reads the mark and charges
// the attempt. B's clock runs past A's lease, so that A's claim is expired to B
// and live to A.
func TestTakeoverSeesTheCountMark(t *testing.T) {
	lease := time.Second
	a, b := twoWorkers(t, Config{ClockSkew: NoClockSkew}, lease+time.Second, consumer.WithLease(lease))
	ctx := context.Background()
	if rep := a.Begin(ctx, []consumer.Claim{{Key: "k", Owner: "a"}})[0]; rep.Status != consumer.StatusAcquired || rep.Attempts != 1 {
		t.Fatalf("A's claim ahead of its handler: %+v", rep)
	}
	pk := b.RecordKey("k")
	m, err := b.read(ctx, pk)
	if err != nil {
		t.Fatal(err)
	}
	stale, err := decode(m)
	if err != nil || stale.counted {
		t.Fatalf("B's read: %+v (%v), want a claim not counted", stale, err)
	}
	if rep := a.Begin(ctx, []consumer.Claim{{Key: "k", Owner: "a", Start: true}})[0]; rep.Status != consumer.StatusAcquired || rep.Fence != 1 {
		t.Fatalf("A's claim sent again as its handler starts: %+v", rep)
	}
	ok, err := b.take(ctx, consumer.Claim{Key: "k", Owner: "b"}, pk, stale, b.nowMs(), true)
	if err != nil || ok {
		t.Fatalf("takeover on the read before A's mark: written %v (%v), want refused", ok, err)
	}
	if rec, err := a.Peek(ctx, "k"); err != nil || rec.Owner != "a" || rec.Fence != 1 || !rec.Counted {
		t.Fatalf("record after the refused takeover: %+v (%v), want A's counted claim", rec, err)
	}
	rep := b.Begin(ctx, []consumer.Claim{{Key: "k", Owner: "b"}})[0]
	if rep.Status != consumer.StatusTakenOver || rep.Fence != 2 || rep.Attempts != 2 {
		t.Fatalf("B's takeover: %+v, want TAKEN_OVER at fence 2, attempt 2 (A's run charged)", rep)
	}
	if rec, err := b.Peek(ctx, "k"); err != nil || rec.Owner != "b" || rec.Attempts != 2 || rec.Counted {
		t.Fatalf("record after B's takeover: %+v (%v), want B's claim at attempt 2, not counted", rec, err)
	}
}
