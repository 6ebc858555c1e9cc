package consumer

import "time"

// SetPipelineGather sets p's gather delays (see Pipeline) for the messages
// submitted after it, so that tests can count settle calls without a timer
// deciding them.
func SetPipelineGather[T any](p *Pipeline[T], claims, settles time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.claimGather, p.settleGather = int64(claims), int64(settles)
}
