package admin

import (
	"context"
	"encoding/base64"
	"slices"
	"strings"
	"time"

	"github.com/idemkit/idemkit/consumer"
)

// States a record can be in, for Query.States.
var States = []string{"started", "completed", "failed", "retry", "forgotten"}

// Query selects records for List.
type Query struct {
	// Scope limits the listing to one scope; "" lists every scope under the store's prefix.
	Scope string
	// States keeps records in these states (see States); empty keeps every state.
	// "corrupt" keeps keys that hold something that is not a record.
	States []string
	// OlderThan keeps records that have been in their state at least this long; 0 keeps all.
	OlderThan time.Duration
	// OwnerPrefix keeps records whose owner token starts with this ("" keeps all).
	OwnerPrefix string
	// KeyPrefix keeps records whose key starts with this ("" keeps all).
	KeyPrefix string
	// LeaseRanOut keeps only started records whose lease has run out (Record.Stale).
	LeaseRanOut bool
	// ErrorKind keeps only failed records that failed this way: KindPermanent or
	// KindExhausted (any case); "" keeps all.
	ErrorKind string
	// Limit ends the page at this many records. Default 100.
	Limit int
	// Cursor is "" to start, then the previous page's Next.
	Cursor string
	// ScanCount is how many keys one scan step examines (SCAN's COUNT). Default 1000.
	ScanCount int
	// MaxExamined ends the page once this many keys were examined, with a cursor to
	// go on, so one call stays short however rare the matches are. Default 100,000.
	MaxExamined int
}

// Page is one page of a listing.
type Page struct {
	Records []Record
	// Next continues the listing; "" when it is complete.
	Next string
	// Examined is how many records this page's scan steps read.
	Examined int
}

func (q *Query) check() error {
	for _, s := range q.States {
		if !validState(s) {
			return invalid("state %q: use one of %s or corrupt", s, strings.Join(States, ", "))
		}
	}
	switch {
	case q.OlderThan < 0:
		return invalid("older than %v: give 0 or more", q.OlderThan)
	case !validKind(q.ErrorKind):
		return invalid("error kind %q: give %s or %s", q.ErrorKind, KindPermanent, KindExhausted)
	case q.Limit < 0, q.ScanCount < 0, q.MaxExamined < 0:
		return invalid("limit %d, scan count %d, max examined %d: give 0 (the default) or more", q.Limit, q.ScanCount, q.MaxExamined)
	}
	if q.Limit == 0 {
		q.Limit = 100
	}
	if q.ScanCount == 0 {
		q.ScanCount = consumer.DefaultScanCount
	}
	if q.MaxExamined == 0 {
		q.MaxExamined = 100_000
	}
	return nil
}

func validState(s string) bool {
	if s == "corrupt" {
		return true
	}
	for _, v := range States {
		if s == v {
			return true
		}
	}
	return false
}

func (q *Query) keep(r Record) bool {
	if len(q.States) > 0 {
		state := r.State
		if r.Corrupt != "" {
			state = "corrupt"
		}
		found := false
		for _, s := range q.States {
			found = found || s == state
		}
		if !found {
			return false
		}
	}
	if q.OwnerPrefix != "" || q.KeyPrefix != "" || q.LeaseRanOut || q.ErrorKind != "" {
		switch {
		case r.Corrupt != "":
			return false
		case !strings.HasPrefix(r.Owner, q.OwnerPrefix), !strings.HasPrefix(string(r.Key), q.KeyPrefix):
			return false
		case q.LeaseRanOut && !r.Stale():
			return false
		case q.ErrorKind != "" && errorKind(r) != strings.ToLower(strings.TrimSpace(q.ErrorKind)):
			return false
		}
	}
	return q.OlderThan == 0 || (r.Corrupt == "" && r.Age >= q.OlderThan)
}

func validKind(k string) bool {
	k = strings.ToLower(strings.TrimSpace(k))
	return k == "" || k == KindPermanent || k == KindExhausted
}

// errorKind is how a failed record failed (KindPermanent or KindExhausted), and
// "" for a record in another state.
func errorKind(r Record) string {
	switch {
	case r.State != "failed" || r.Corrupt != "":
		return ""
	case r.Permanent:
		return KindPermanent
	}
	return KindExhausted
}

// List returns one page of the records that q selects. A page's cursor names the
// scan step it stopped in and the last record of that step it returned: a step's
// matches are taken in the order of their scope and key, and the next page runs
// the step again and goes on after that record. A step run again may not return
// the same keys in the same order (Redis's table grows between the two runs, say),
// so counting the matches already returned could skip a record; ordering them
// cannot, and the keys the larger table leaves out of the step come in later
// steps. Those later steps may return a key an earlier page showed (as SCAN may
// return a key twice), so a complete listing may show a record on two pages; a
// page never shows one twice.
func (in *Inspector) List(ctx context.Context, q Query) (Page, error) {
	if err := q.check(); err != nil {
		return Page{}, err
	}
	step, after, err := parseCursor(q.Cursor)
	if err != nil {
		return Page{}, err
	}
	var page Page
	shown := make(map[string]bool)
	for {
		sp, err := in.store.ScanRecords(ctx, consumer.ScanQuery{Scope: q.Scope, Cursor: step, Count: q.ScanCount})
		if err != nil {
			return page, err
		}
		page.Examined += len(sp.Records)
		var matches []Record
		for _, a := range sp.Records {
			if r := view(a); q.keep(r) {
				matches = append(matches, r)
			}
		}
		slices.SortFunc(matches, func(a, b Record) int { return strings.Compare(recordID(a), recordID(b)) })
		matches = slices.CompactFunc(matches, func(a, b Record) bool { return recordID(a) == recordID(b) })
		if after != "" {
			i, _ := slices.BinarySearchFunc(matches, after, func(r Record, id string) int { return strings.Compare(recordID(r), id) })
			for i < len(matches) && recordID(matches[i]) <= after {
				i++
			}
			matches = matches[i:]
		}
		matches = slices.DeleteFunc(matches, func(r Record) bool { return shown[recordID(r)] })
		if need := q.Limit - len(page.Records); len(matches) > need {
			page.Records = append(page.Records, matches[:need]...)
			page.Next = cursor(step, recordID(matches[need-1]))
			return page, nil
		}
		page.Records = append(page.Records, matches...)
		for _, r := range matches {
			shown[recordID(r)] = true
		}
		if sp.Next == "" {
			return page, nil
		}
		step, after = sp.Next, ""
		if len(page.Records) == q.Limit || page.Examined >= q.MaxExamined {
			page.Next = cursor(step, "")
			return page, nil
		}
		if err := ctx.Err(); err != nil {
			return page, err
		}
	}
}

// A listing cursor is "0/<scan cursor>" at the start of a scan step, or
// "k<record>/<scan cursor>" after a record of it (its recordID, base64url).
func cursor(step, after string) string {
	if after == "" {
		return "0/" + step
	}
	return "k" + base64.RawURLEncoding.EncodeToString([]byte(after)) + "/" + step
}

func parseCursor(c string) (step, after string, err error) {
	if c == "" {
		return "", "", nil
	}
	head, rest, ok := strings.Cut(c, "/")
	switch {
	case ok && head == "0":
		return rest, "", nil
	case ok && strings.HasPrefix(head, "k"):
		b, derr := base64.RawURLEncoding.DecodeString(head[1:])
		if derr == nil && len(b) > 0 {
			return rest, string(b), nil
		}
	}
	return "", "", invalid("cursor %q is not one a listing returned", c)
}

// recordID orders a scan step's matches: scope, then key.
func recordID(r Record) string { return r.Scope + "\x00" + string(r.Key) }

// StatsQuery selects what Stats counts.
type StatsQuery struct {
	// Scope limits the count to one scope; "" counts every scope.
	Scope string
	// MaxRecords stops the count after this many records, and marks it Sampled.
	// Default 1,000,000. The count stops at the end of a scan step, so it may
	// read a step's worth more.
	MaxRecords int
	// ScanCount is how many keys one scan step examines. Default 1000, or
	// MaxRecords when that is smaller.
	ScanCount int
	// MaxNotes is how many of the newest operator notes Stats.Notes keeps.
	// Default 20.
	MaxNotes int
}

// ScopedNote is one operator note with the record it is in.
type ScopedNote struct {
	Scope string
	Key   consumer.Key
	consumer.OperatorNote
}

// Stats are the counts of records by state.
type Stats struct {
	Scope string // "" for every scope
	// Counts maps each state (and "corrupt") to its number of records.
	Counts map[string]int
	// Records is how many records were counted.
	Records int
	// Stale is how many started records' leases have run out (the next delivery
	// takes them over).
	Stale int
	// OldestStarted is the started record longest in its state; nil when none.
	OldestStarted *Record
	// ByScope maps each scope to its records' counts by state (and "corrupt").
	ByScope map[string]map[string]int
	// FailedByKind maps each error kind of the failed records (KindPermanent,
	// KindExhausted) to their number.
	FailedByKind map[string]int
	// Notes are the newest operator notes of the counted records (at most
	// MaxNotes), newest first.
	Notes []ScopedNote
	// Sampled says the count stopped at MaxRecords before the scan was complete:
	// Counts are then those of a sample (SCAN's order has nothing to do with a
	// record's state or age, so proportions hold for the whole).
	Sampled bool
	// KeysOnServer is how many keys the store's servers hold in all, records and
	// everything else (-1 when the store cannot say).
	KeysOnServer int64
	// Elapsed is how long the count took.
	Elapsed time.Duration
}

// Stats counts records by state, with bounded scan steps.
func (in *Inspector) Stats(ctx context.Context, q StatsQuery) (Stats, error) {
	switch {
	case q.MaxRecords < 0, q.ScanCount < 0, q.MaxNotes < 0:
		return Stats{}, invalid("max records %d, scan count %d, max notes %d: give 0 (the default) or more", q.MaxRecords, q.ScanCount, q.MaxNotes)
	case q.MaxRecords == 0:
		q.MaxRecords = 1_000_000
	}
	if q.MaxNotes == 0 {
		q.MaxNotes = 20
	}
	if q.ScanCount == 0 {
		q.ScanCount = min(consumer.DefaultScanCount, q.MaxRecords)
	}
	start := time.Now()
	st := Stats{Scope: q.Scope, Counts: make(map[string]int), KeysOnServer: -1, ByScope: make(map[string]map[string]int),
		FailedByKind: make(map[string]int)}
	if kc, ok := in.store.(KeyCounter); ok {
		if n, err := kc.KeyCount(ctx); err == nil {
			st.KeysOnServer = n
		}
	}
	step := ""
	for {
		sp, err := in.store.ScanRecords(ctx, consumer.ScanQuery{Scope: q.Scope, Cursor: step, Count: q.ScanCount})
		if err != nil {
			return st, err
		}
		for _, a := range sp.Records {
			r := view(a)
			st.Records++
			state := r.State
			if r.Corrupt != "" {
				state = "corrupt"
			}
			st.Counts[state]++
			if st.ByScope[r.Scope] == nil {
				st.ByScope[r.Scope] = make(map[string]int)
			}
			st.ByScope[r.Scope][state]++
			if r.Corrupt != "" {
				continue
			}
			if k := errorKind(r); k != "" {
				st.FailedByKind[k]++
			}
			st.Notes = newestNotes(st.Notes, r, q.MaxNotes)
			if r.State != "started" {
				continue
			}
			if r.Stale() {
				st.Stale++
			}
			if st.OldestStarted == nil || r.Age > st.OldestStarted.Age {
				st.OldestStarted = &r
			}
		}
		if step = sp.Next; step == "" {
			break
		}
		if st.Records >= q.MaxRecords {
			st.Sampled = true
			break
		}
		if err := ctx.Err(); err != nil {
			return st, err
		}
	}
	st.Elapsed = time.Since(start)
	return st, nil
}

// newestNotes adds r's notes to notes, newest first, keeping at most n.
func newestNotes(notes []ScopedNote, r Record, n int) []ScopedNote {
	for _, note := range r.Notes {
		i := len(notes)
		for i > 0 && note.Time.After(notes[i-1].Time) {
			i--
		}
		if i >= n {
			break // r's notes are newest first: the rest are older still
		}
		notes = slices.Insert(notes, i, ScopedNote{Scope: r.Scope, Key: r.Key, OperatorNote: note})
		if len(notes) > n {
			notes = notes[:n]
		}
	}
	return notes
}
