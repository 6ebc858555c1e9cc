package postgres

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/jackc/pgx/v5/pgxpool"
)

// An owner cut off from PostgreSQL by a network partition (its connection
// blackholed: calls hang, nothing is closed) has its handler cancelled before
// the lease runs out, so before another owner, reaching the database, takes the
// key over and runs its handler; the cut-off owner's outcome is not a success,
// the key's handler ran exactly twice (the cut-off run, cancelled, and the
// takeover), and once the partition heals a redelivery is a DUPLICATE of the
// takeover's result. Three repetitions, with the plain and partitioned stores.
func TestStorePartitionCancelsOwnerBeforeTakeover(t *testing.T) {
	for _, kind := range []string{"postgres", "partitioned"} {
		t.Run(kind, func(t *testing.T) {
			for rep := range 3 {
				partitionRun(t, kind, rep)
			}
		})
	}
}

func partitionRun(t *testing.T, kind string, rep int) {
	direct := crashSchema(t, kind)
	ctx := context.Background()
	px, cut := proxied(t, direct)
	newStore := NewStore
	if kind == "partitioned" {
		newStore = NewPartitionedStore
	}
	const lease = 1500 * time.Millisecond
	opts := []consumer.Option{consumer.WithScope("partition"), consumer.WithLease(lease), consumer.WithCallTimeout(300 * time.Millisecond)}
	a, err := newStore(cut, opts...)
	if err != nil {
		t.Fatal(err)
	}
	b, err := newStore(direct, opts...)
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	var cancelledAt, takeoverAt atomic.Int64
	started := make(chan struct{})
	done := make(chan consumer.Result[string], 1)
	go func() {
		done <- consumer.ExecuteIdempotently(ctx, a, "pay-1", nil, func(ctx context.Context) (string, error) {
			runs.Add(1)
			close(started)
			<-ctx.Done()
			cancelledAt.Store(time.Now().UnixNano())
			return "", ctx.Err()
		})
	}()
	<-started
	px.Blackhole()
	var second consumer.Result[string]
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		second = consumer.ExecuteIdempotently(ctx, b, "pay-1", nil, func(context.Context) (string, error) {
			runs.Add(1)
			takeoverAt.Store(time.Now().UnixNano())
			return "charged by b", nil
		})
		if second.Outcome != consumer.InProgress {
			break
		}
	}
	if second.Outcome != consumer.Success || second.Value != "charged by b" {
		t.Fatalf("rep %d: the takeover: %v %q %v", rep, second.Outcome, second.Value, second.Err)
	}
	first := <-done
	if first.Outcome == consumer.Success {
		t.Fatalf("rep %d: the cut-off owner succeeded", rep)
	}
	if c, o := cancelledAt.Load(), takeoverAt.Load(); c == 0 || c >= o {
		t.Fatalf("rep %d: the cut-off handler was cancelled at %d, the takeover ran at %d", rep, c, o)
	}
	px.Pass()
	again := consumer.ExecuteIdempotently(ctx, a, "pay-1", nil, func(context.Context) (string, error) {
		runs.Add(1)
		return "charged again", nil
	})
	if again.Outcome != consumer.Duplicate || again.Value != "charged by b" {
		t.Fatalf("rep %d: after the partition: %v %q %v", rep, again.Outcome, again.Value, again.Err)
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("rep %d: the handler ran %d times, want 2", rep, n)
	}
	t.Logf("rep %d: cut-off handler cancelled %v before the takeover's ran (first outcome %v: %v)", rep,
		time.Duration(takeoverAt.Load()-cancelledAt.Load()), first.Outcome, errors.Unwrap(first.Err))
}

// proxied is a pool on direct's database and schema through a fault proxy.
func proxied(t *testing.T, direct *pgxpool.Pool) (*testenv.FaultProxy, *pgxpool.Pool) {
	t.Helper()
	target := net.JoinHostPort(direct.Config().ConnConfig.Host, strconv.Itoa(int(direct.Config().ConnConfig.Port)))
	px := testenv.NewFaultProxy(t, target)
	cfg := direct.Config()
	host, port, _ := net.SplitHostPort(px.Addr())
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = host, uint16(p)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return px, pool
}

// The reply to a settlement is lost (PostgreSQL completed the record, the
// connection dies before the owner hears it): nothing runs twice. Whatever the
// owner concludes, the next delivery is a DUPLICATE with the stored result, and
// the handler ran once in all.
func TestStoreSettlementReplyLost(t *testing.T) {
	for _, kind := range []string{"postgres", "partitioned"} {
		t.Run(kind, func(t *testing.T) {
			direct := crashSchema(t, kind)
			px, cut := proxied(t, direct)
			newStore := NewStore
			if kind == "partitioned" {
				newStore = NewPartitionedStore
			}
			s, err := newStore(cut, consumer.WithScope("lost"), consumer.WithCallTimeout(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			var runs atomic.Int32
			first := consumer.ExecuteIdempotently(ctx, s, "pay-1", nil, func(context.Context) (string, error) {
				runs.Add(1)
				px.DropNextReply() // the next reply is the settlement's
				return "charged", nil
			})
			rec, err := s.Peek(ctx, "pay-1")
			if err != nil || rec.State != "completed" {
				t.Fatalf("record after the lost reply: %s %v (first outcome %v %v)", rec.State, err, first.Outcome, first.Err)
			}
			again := consumer.ExecuteIdempotently(ctx, s, "pay-1", nil, func(context.Context) (string, error) {
				runs.Add(1)
				return "charged twice", nil
			})
			if again.Outcome != consumer.Duplicate || again.Value != "charged" || runs.Load() != 1 {
				t.Fatalf("redelivery: %v %q %v, handler runs %d (first outcome %v %v)", again.Outcome, again.Value, again.Err,
					runs.Load(), first.Outcome, first.Err)
			}
			t.Logf("first outcome with the reply lost: %v %v", first.Outcome, first.Err)
		})
	}
}
