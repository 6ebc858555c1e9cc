package consumer

import (
	"context"
	"time"
)

// SetPipelineGather sets p's gather delays (see Pipeline) for the messages
// submitted after it, so that tests can count settle calls without a timer
// deciding them.
func SetPipelineGather[T any](p *Pipeline[T], claims, settles time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.claimGather, p.settleGather = int64(claims), int64(settles)
}

// RenewPipelineLeases runs one renewal of p's lease keeper now, as its timer
// would, so that a test decides when a renewal is in flight.
func RenewPipelineLeases[T any](ctx context.Context, p *Pipeline[T]) { p.keep.tick(ctx) }
