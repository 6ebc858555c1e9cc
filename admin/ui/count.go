package ui

import (
	"context"
	"sync"
	"time"

	"github.com/idemkit/idemkit/admin"
)

// The overview's counts. A view counts at most WithSample records itself
// (admin.StatsQuery.MaxRecords), so it stays fast on any store. When that
// sample is the whole store, the view shows exact, live counts. When the store
// holds more, the view starts a full count in the background (one at a time)
// and shows the newest full count with its age, or the sample, marked as one,
// until the first full count is done; a full count older than WithCountEvery is
// made again by the next view that finds it so.

// fullCountTimeout bounds one background count.
const fullCountTimeout = 10 * time.Minute

// fullCountMax is the most records one background count reads.
const fullCountMax = 50_000_000

// maxNotes is how many of the newest operator notes a count keeps
// (admin.StatsQuery.MaxNotes) for the overview's recent actions: room for a
// bulk action's notes, one per record, beside others'. It costs no reads.
const maxNotes = 200

// counter keeps the newest full count and runs the next one.
type counter struct {
	in    *admin.Inspector
	every time.Duration

	ctx    context.Context // ended by close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	last    *admin.Stats
	began   time.Time // when last was started
	at      time.Time // when last was finished
	running time.Time // when the running count started; zero when none runs
	err     error     // the last count's error, if it failed
}

func newCounter(in *admin.Inspector, every time.Duration) *counter {
	ctx, cancel := context.WithCancel(context.Background())
	return &counter{in: in, every: every, ctx: ctx, cancel: cancel}
}

// counts is what the overview shows of the records' counts.
type counts struct {
	admin.Stats
	// Full says Stats is a full count made in the background, At when it
	// finished; otherwise Stats is this view's own count (a sample when
	// Stats.Sampled).
	Full bool
	At   time.Time
	Age  time.Duration
	// Began is when the count that read Stats started: a change made since may
	// not be in it.
	Began time.Time
	// Running says a full count runs now, since Since.
	Running bool
	Since   time.Duration
	// Err is why the last background count failed.
	Err string
}

// get returns the counts for one view, counting at most sample records itself.
func (c *counter) get(ctx context.Context, sample int) (counts, error) {
	c.mu.Lock()
	last, began, at := c.last, c.began, c.at
	c.mu.Unlock()
	if last != nil {
		if c.every > 0 && time.Since(at) > c.every {
			c.start()
		}
		return c.view(counts{Stats: *last, Full: true, At: at, Age: time.Since(at), Began: began}), nil
	}
	began = time.Now()
	st, err := c.in.Stats(ctx, admin.StatsQuery{MaxRecords: sample, MaxNotes: maxNotes})
	if err != nil {
		return counts{}, err
	}
	if st.Sampled && c.every > 0 {
		c.start()
	}
	return c.view(counts{Stats: st, Began: began}), nil
}

func (c *counter) view(v counts) counts {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.running.IsZero() {
		v.Running, v.Since = true, time.Since(c.running)
	}
	if c.err != nil {
		v.Err = c.err.Error()
	}
	return v
}

// start starts a full count in the background unless one runs or the counter
// is closed.
func (c *counter) start() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.running.IsZero() || c.ctx.Err() != nil {
		return
	}
	began := time.Now()
	c.running = began
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		ctx, cancel := context.WithTimeout(c.ctx, fullCountTimeout)
		defer cancel()
		st, err := c.in.Stats(ctx, admin.StatsQuery{MaxRecords: fullCountMax, MaxNotes: maxNotes})
		c.mu.Lock()
		defer c.mu.Unlock()
		c.running, c.err = time.Time{}, err
		if err == nil {
			c.last, c.began, c.at = &st, began, time.Now()
		}
	}()
}

// close stops a running count and waits for it.
func (c *counter) close() {
	c.cancel()
	c.wg.Wait()
}
