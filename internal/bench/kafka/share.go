package main

// The share-group lanes: the same topic through adapters/kafkashare, a fresh
// share group per lane (share.auto.offset.reset=earliest), with a 2 ms handler,
// beside the classic group's 2 ms lane in the same run. Every record of a poll is
// acknowledged before the client polls again, so the lane runs several member
// clients (WithClients) of WithMaxPollRecords each: in flight at most their
// product, handlers bounded by WithConcurrency.

import (
	"context"
	"fmt"
	"time"

	"github.com/idemkit/idemkit/adapters/kafkashare"
	"github.com/twmb/franz-go/pkg/kgo"
)

// shareLane names the share lane of clients x maxPoll.
func shareLane(clients, maxPoll int) string {
	return fmt.Sprintf("share group, 2 ms handler, %d clients x %d", clients, maxPoll)
}

// share runs the topic through the share-group adapter until every record is
// acknowledged; the handler waits wait.
func (b *bench) share(wait time.Duration, clients, maxPoll int) error {
	group, prefix := b.fresh("share")
	seen := &counter{}
	s, err := b.store(prefix, group, seen)
	if err != nil {
		return err
	}
	admin, err := kgo.NewClient(kgo.SeedBrokers(b.brokers...))
	if err != nil {
		return err
	}
	err = kafkashare.SetGroupConfigs(context.Background(), admin, group, map[string]string{"share.auto.offset.reset": "earliest"})
	admin.Close()
	if err != nil {
		return err
	}
	c, err := kafkashare.New(s, []kgo.Opt{kgo.SeedBrokers(b.brokers...), kgo.ShareGroup(group), kgo.ConsumeTopics("bench")},
		func(ctx context.Context, _ *kgo.Record) (struct{}, error) {
			if wait > 0 {
				t := time.NewTimer(wait)
				defer t.Stop()
				select {
				case <-t.C:
				case <-ctx.Done():
				}
			}
			return struct{}{}, nil
		}, kafkashare.WithClients(clients), kafkashare.WithMaxPollRecords(maxPoll), kafkashare.WithShutdownGrace(time.Second))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- c.Run(ctx) }()
	for seen.n.Load() < int64(b.n) {
		if time.Since(start) > 5*time.Minute {
			cancel()
			<-done
			return fmt.Errorf("share: only %d of %d acknowledged", seen.n.Load(), b.n)
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	return <-done
}
