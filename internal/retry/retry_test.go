package retry

import (
	"context"
	"testing"
	"time"
)

func TestBackoffStaysWithinBounds(t *testing.T) {
	for n := 1; n <= 40; n++ {
		want := min(100*time.Millisecond<<min(n-1, 30), 5*time.Second)
		for i := 0; i < 50; i++ {
			d := Backoff(100*time.Millisecond, 5*time.Second, n)
			if d < want/2 || d > want {
				t.Fatalf("Backoff(n=%d) = %v, want within [%v, %v]", n, d, want/2, want)
			}
		}
	}
}

func TestSleepEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Sleep(ctx, time.Hour) {
		t.Fatal("Sleep on a cancelled context waited")
	}
	if !Sleep(context.Background(), time.Millisecond) {
		t.Fatal("Sleep without cancellation reported false")
	}
}
