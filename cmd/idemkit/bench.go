package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/lua"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
)

// commandCounter counts the commands a client sends, each command of a pipeline on its own.
type commandCounter struct{ n atomic.Int64 }

func (c *commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { c.n.Add(1); return next(ctx, cmd) }
}
func (c *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { c.n.Add(int64(len(cmds))); return next(ctx, cmds) }
}

// lane is one measured path.
type lane struct {
	Name      string  `json:"name"`
	Messages  int     `json:"messages"`
	Rate      float64 `json:"msgs_per_s"`
	P50us     float64 `json:"p50_us"`
	P99us     float64 `json:"p99_us"`
	CallsPer  float64 `json:"redis_calls_per_msg"`
	LatencyOf string  `json:"latency_of"`
}

func (a *app) benchCmd() *cobra.Command {
	var n, bn, b int
	c := &cobra.Command{
		Use:   "bench",
		Short: "measure this deployment's Redis: the scripts alone, ExecuteIdempotently and ExecuteBatch (msgs/s, latency)",
		Long: `bench runs three paths with a no-op handler against the Redis the flags name and
prints one table: the begin and complete scripts called directly one message at a
time (the floor), ExecuteIdempotently one message at a time, and ExecuteBatch with
-b messages per call. Latency is per message for the first two and per batch for
the last. It writes records under "<prefix>-bench-<run>" with a 10 s lease and a
one-minute retention, so they are gone about 70 s after the run. It measures
Redis only, and refuses --postgres and --dynamodb (exit 2).`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if n < 1 || bn < 1 || b < 1 {
				return usagef("--messages, --batch-n and --batch-size take at least 1")
			}
			if err := a.needsRedis("bench"); err != nil {
				return err
			}
			client, err := a.redisClient()
			if err != nil {
				return err
			}
			cnt := &commandCounter{}
			client.AddHook(cnt)
			run := strconv.FormatInt(time.Now().UnixNano(), 36)
			store, err := redisstore.NewStore(client, consumer.WithPrefix(a.prefix+"-bench-"+run), consumer.WithScope("bench"),
				consumer.WithLease(10*time.Second), consumer.WithRetention(time.Minute), consumer.WithCallTimeout(a.timeout),
				redisstore.WithEvictionCheck(redisstore.EvictionIgnore))
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if err := store.Load(ctx); err != nil {
				return a.storeErr(err)
			}
			ns := uuid.New()
			keys := func(lane string, k int) []consumer.Key {
				out := make([]consumer.Key, k)
				for i := range out {
					out[i] = consumer.NewKey(ns, lane, strconv.Itoa(i))
				}
				return out
			}
			payload := []byte(`{"order":42,"amount":1999}`)
			measure := func(name, of string, ks []consumer.Key, per int, body func(ks []consumer.Key) error) (lane, error) {
				c0 := cnt.n.Load()
				lat := make([]time.Duration, 0, len(ks)/per+1)
				start := time.Now()
				for lo := 0; lo < len(ks); lo += per {
					t := time.Now()
					if err := body(ks[lo:min(lo+per, len(ks))]); err != nil {
						return lane{}, fmt.Errorf("%s: %w", name, a.storeErr(err))
					}
					lat = append(lat, time.Since(t))
				}
				el := time.Since(start)
				slices.Sort(lat)
				q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Nanoseconds()) / 1e3 }
				return lane{Name: name, Messages: len(ks), Rate: float64(len(ks)) / el.Seconds(), P50us: q(0.5), P99us: q(0.99),
					CallsPer: float64(cnt.n.Load()-c0) / float64(len(ks)), LatencyOf: of}, nil
			}
			runner := lua.NewRunner(client)
			fp := [16]byte(consumer.FingerprintOf(payload))
			floor := func(ks []consumer.Key) error {
				now := time.Now().Unix()
				key := store.RecordKey(ks[0])
				claims := lua.Claims{Items: []lua.BeginItem{{Key: key, Owner: "bench-" + run, Fingerprint: &fp}}, Replies: make([]lua.BeginReply, 1)}
				runner.Begin(ctx, lua.BeginArgs{Lease: 10 * time.Second, Retention: time.Minute, MaxAttempts: 5, Now: now}, claims)
				if r := claims.Replies[0]; r.Err != nil || r.Code != lua.Acquired {
					return fmt.Errorf("begin: %+v", r)
				}
				st := lua.Settlements{Items: []lua.SettleItem{{Key: key, Owner: "bench-" + run, Fence: 1, Attempts: 1, Created: now,
					Fingerprint: &fp, Complete: true, Result: []byte("{}")}}, Replies: make([]lua.AckReply, 1)}
				runner.Settle(ctx, lua.SettleArgs{MaxAttempts: 5, Now: now}, st)
				if r := st.Replies[0]; r.Err != nil || r.Ack != lua.AckOK {
					return fmt.Errorf("complete: %+v", r)
				}
				return nil
			}
			single := func(ks []consumer.Key) error {
				r := consumer.ExecuteIdempotently(ctx, store, ks[0], payload, func(context.Context) (struct{}, error) { return struct{}{}, nil })
				if r.Outcome != consumer.Success {
					return r.Err
				}
				return nil
			}
			batch := func(ks []consumer.Key) error {
				items := make([]consumer.BatchItem, len(ks))
				for i, k := range ks {
					items[i] = consumer.BatchItem{Key: k, Payload: payload}
				}
				for _, r := range consumer.ExecuteBatch(ctx, store, items, func(context.Context, int, consumer.BatchItem) (struct{}, error) {
					return struct{}{}, nil
				}) {
					if r.Outcome != consumer.Success {
						return r.Err
					}
				}
				return nil
			}
			var lanes []lane
			for _, l := range []struct {
				name, of string
				ks       []consumer.Key
				per      int
				body     func([]consumer.Key) error
			}{
				{"floor: begin + complete scripts", "message", keys("floor", n), 1, floor},
				{"ExecuteIdempotently", "message", keys("single", n), 1, single},
				{fmt.Sprintf("ExecuteBatch B=%d", b), "batch", keys("batch", bn), b, batch},
			} {
				res, err := measure(l.name, l.of, l.ks, l.per, l.body)
				if err != nil {
					return err
				}
				lanes = append(lanes, res)
			}
			if a.json {
				return a.printJSON(map[string]any{"redis": a.redisAddrs, "lanes": lanes})
			}
			fmt.Fprintf(a.out, "idemkit bench: Redis %s, no-op handler, one goroutine\n", a.redisAddrs)
			tw := tabwriter.NewWriter(a.out, 0, 0, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintln(tw, "path\tmessages\tmsgs/s\tp50 us\tp99 us\tlatency of\tRedis calls/msg\t")
			for _, l := range lanes {
				fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.0f\t%.0f\t%s\t%.3f\t\n", l.Name, l.Messages, l.Rate, l.P50us, l.P99us, l.LatencyOf, l.CallsPer)
			}
			return tw.Flush()
		},
	}
	c.Flags().IntVarP(&n, "messages", "n", 2000, "messages for the one-at-a-time paths")
	c.Flags().IntVar(&bn, "batch-n", 20000, "messages for the batch path")
	c.Flags().IntVarP(&b, "batch-size", "b", 100, "batch size")
	return c
}
