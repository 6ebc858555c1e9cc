package ui

import (
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/idemkit/idemkit/admin"
)

// Option configures a Handler.
type Option interface{ apply(*cfg) }

type optFunc func(*cfg)

func (f optFunc) apply(c *cfg) { f(c) }

// ActorFunc names the person behind a request, from the embedding service's own
// authentication. An error refuses the request's change (403) with its text.
type ActorFunc func(*http.Request) (string, error)

type cfg struct {
	prefix     string
	actor      ActorFunc
	plans      fs.FS
	sample     int
	countEvery time.Duration
	refresh    time.Duration
	bulkMax    int
	maxPage    int
	examine    int
	logger     *slog.Logger
}

// WithPrefix is the path the handler is mounted under ("/idemkit" for
// mux.Handle("/idemkit/", ...)): every link and form the pages make starts with
// it, and the handler strips it from requests. Default "" (mounted at the root).
func WithPrefix(prefix string) Option {
	return optFunc(func(c *cfg) { c.prefix = prefix })
}

// WithActor makes the UI able to change records (unstick, forget, rerun): fn
// names the person behind each change request, and the name is recorded in each
// changed record's operator notes with the reason they give. It needs a store
// with the service's scope: New refuses one on consumer.DefaultScope. Default
// nil: the UI is read-only, shows no action forms and refuses every change (403).
func WithActor(fn ActorFunc) Option {
	return optFunc(func(c *cfg) { c.actor = fn })
}

// WithPlans shows the replay plans (JSON files written by `idemkit plan --out`)
// at the top of fsys on the Replay plans page, read-only: os.DirFS(dir), say.
// Default nil: the page says no plan directory was given.
func WithPlans(fsys fs.FS) Option {
	return optFunc(func(c *cfg) { c.plans = fsys })
}

// WithSample is how many records one view of the overview counts itself at
// most (admin.StatsQuery.MaxRecords). A store of no more records gets exact,
// live counts on every view; a larger one is counted in full in the background
// (see WithCountEvery), and until the first full count is done the view shows
// the counts of its sample, marked as such. Default 2,000: a view stays within
// a few milliseconds of two scan steps on any store.
func WithSample(n int) Option {
	return optFunc(func(c *cfg) { c.sample = n })
}

// WithCountEvery is how old the overview's full count of a large store (more
// records than WithSample) may get: the first view that finds it older starts
// the next one in the background, one at a time, and shows the old one with its
// age meanwhile. 0 turns background counts off: the overview then shows only
// its sample on a large store. Default 1m. A full count reads every record with
// bounded scan steps (admin.Inspector.Stats); Close stops a running one.
func WithCountEvery(d time.Duration) Option {
	return optFunc(func(c *cfg) { c.countEvery = d })
}

// WithRefresh is how often the overview reloads itself in the browser; 0 turns
// auto-refresh off. Default 15s.
func WithRefresh(d time.Duration) Option {
	return optFunc(func(c *cfg) { c.refresh = d })
}

// WithBulkMax is the most records one bulk action may change (admin.Bulk.Max).
// Default admin.DefaultBulkMax (1,000).
func WithBulkMax(n int) Option {
	return optFunc(func(c *cfg) { c.bulkMax = n })
}

// WithLogger logs every change the UI makes and every one it refuses (actor,
// operation, scope, counts; never keys or results). Default: discard.
func WithLogger(l *slog.Logger) Option {
	return optFunc(func(c *cfg) { c.logger = l })
}

// maxPage is the most records one Records page shows; a request for more gets
// this many.
const maxPage = 500

// examinePerPage is how many records one Records page examines at most
// (admin.Query.MaxExamined) before it ends with a cursor to go on.
const examinePerPage = 20_000

var prefixRE = regexp.MustCompile(`^(/[A-Za-z0-9._~-]+)*$`)

func (c *cfg) validate() error {
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	c.prefix = strings.TrimSuffix(c.prefix, "/")
	switch {
	case !prefixRE.MatchString(c.prefix):
		return fmt.Errorf("ui: prefix %q: give a path of plain segments starting with a slash, like /idemkit", c.prefix)
	case c.sample < 0:
		return fmt.Errorf("ui: sample %d: give 0 (the default, 2,000) or more", c.sample)
	case c.countEvery < 0:
		return fmt.Errorf("ui: count every %v: give 0 (no background counts) or more", c.countEvery)
	case c.refresh < 0:
		return fmt.Errorf("ui: refresh %v: give 0 (off) or more", c.refresh)
	case c.refresh > 0 && c.refresh < time.Second:
		return fmt.Errorf("ui: refresh %v: give at least 1s, or 0 for off", c.refresh)
	case c.bulkMax < 0:
		return fmt.Errorf("ui: bulk max %d: give 0 (the default, %d) or more", c.bulkMax, admin.DefaultBulkMax)
	}
	if c.sample == 0 {
		c.sample = 2000
	}
	if c.bulkMax == 0 {
		c.bulkMax = admin.DefaultBulkMax
	}
	c.maxPage, c.examine = maxPage, examinePerPage
	return nil
}
