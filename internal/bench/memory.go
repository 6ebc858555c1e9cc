package main

import (
	"context"
	"fmt"

	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/benchkit"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/redis/go-redis/v9"
)

// rawCodec stores a []byte result as it is: an empty result costs nothing.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return v.([]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}

// memory measures Redis's used_memory per completed record: n keys completed
// through ExecuteBatch with an empty result and with a 200-byte one, beside n
// plain keys of the same name length holding one byte with a TTL (the least any
// record with a TTL can cost there).
func (r *rig) memory(n int) error {
	example, err := redisstore.NewStore(r.client, consumer.WithScope("bench"), redisstore.WithEvictionCheck(redisstore.EvictionIgnore))
	if err != nil {
		return err
	}
	fmt.Printf("\nRedis memory per completed record (%d records, default prefix, key %d bytes: %q)\n", n,
		len(example.RecordKey(key("m", "x", 0))), example.RecordKey(key("m", "x", 0)))
	lanes := []struct {
		name   string
		result []byte
		plain  bool
	}{
		{"plain key: 1-byte value with a TTL", nil, true},
		{"idemkit, empty result", []byte{}, false},
		{"idemkit, 200-byte result", make([]byte, 200), false},
	}
	for li, lane := range lanes {
		if err := r.admin.FlushAll(r.ctx).Err(); err != nil {
			return err
		}
		before, err := benchkit.UsedMemory(r.ctx, r.admin)
		if err != nil {
			return err
		}
		store, err := redisstore.NewStore(r.client, consumer.WithScope("bench"), consumer.WithCodec(rawCodec{}),
			redisstore.WithEvictionCheck(redisstore.EvictionIgnore))
		if err != nil {
			return err
		}
		items := make([]consumer.BatchItem, r.b)
		for start := 0; start < n; start += r.b {
			if lane.plain {
				pipe := r.client.Pipeline()
				for i := 0; i < r.b; i++ {
					pipe.SetArgs(r.ctx, store.RecordKey(key("m", fmt.Sprint(li), start+i)), "x", redis.SetArgs{TTL: ret})
				}
				if _, err := pipe.Exec(r.ctx); err != nil {
					return err
				}
				continue
			}
			for i := range items {
				items[i] = consumer.BatchItem{Key: key("m", fmt.Sprint(li), start+i), Payload: payload}
			}
			res := consumer.ExecuteBatch(r.ctx, store, items, func(_ context.Context, _ int, _ consumer.BatchItem) ([]byte, error) {
				return lane.result, nil
			})
			for _, x := range res {
				if x.Outcome != consumer.Success {
					return fmt.Errorf("%s: %v %v", lane.name, x.Outcome, x.Err)
				}
			}
		}
		after, err := benchkit.UsedMemory(r.ctx, r.admin)
		if err != nil {
			return err
		}
		per := float64(after-before) / float64(n)
		fmt.Printf("  %-40s %7.1f bytes\n", lane.name, per)
		if li == 1 {
			fmt.Printf("  %-40s %7s %s\n", "target <= 160 bytes", "", benchkit.Verdict(per <= 160))
		}
	}
	return r.admin.FlushAll(r.ctx).Err()
}
