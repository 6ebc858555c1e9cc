package ui

import (
	"cmp"
	"html/template"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/idemkit/idemkit/admin"
	"github.com/idemkit/idemkit/consumer"
)

// The overview's recent operator actions are read from the store: the operator
// notes ("<op> by <actor>: <reason>") of the records the overview's count read
// (the newest maxNotes of them), so a change made anywhere shows: through this
// handler, another UI process, idemkit, a service's own admin code. They cost no
// read of their own. Notes with the same text in the same scope, each within
// groupGap of the next, are one row (a bulk action writes one per record),
// dated by the newest.
//
// A count reads a change only if it began after it, and a sample reads only
// some records, so a handler also keeps its own changes (at most maxMade) and
// shows each, marked, until a count that read every record and began after it
// has read it back: an operator sees their change at once, also on a large
// store whose full count is older than the change.

// made is one change made through this handler.
type made struct {
	Time  time.Time // when it had been made
	Scope string
	Text  string         // the note recorded in each record
	Keys  []consumer.Key // the records it changed, in the order changed
}

// actionRow is one row of the overview's recent actions.
type actionRow struct {
	Time              time.Time // the newest note's
	Note              string    // "<op> by <actor>: <reason>"
	Op, Actor, Reason string    // the note's parts; only Reason when it does not read so
	Scope             string
	Key               consumer.Key // the newest note's record
	Link              template.URL
	N                 int  // how many records
	AtLeast           bool // the count kept only the newest of this row's notes
	Here              bool // made through this handler and not read back from the store yet
}

// maxActionRows is how many rows the overview lists.
const maxActionRows = 20

// groupGap is the most time between two notes of one row.
const groupGap = time.Minute

// remember keeps a change made through this handler, if it changed a record.
func (h *Handler) remember(m made) {
	if len(m.Keys) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.made = slices.Insert(h.made, 0, m)
	if len(h.made) > maxMade {
		h.made = h.made[:maxMade]
	}
}

type noteKey struct {
	scope, text string
	key         consumer.Key
}

// recent is the overview's recent actions, from the notes of the count cs and
// the handler's own changes that cs may not have read.
func (h *Handler) recent(cs counts) []actionRow {
	inCount := make(map[noteKey]bool, len(cs.Notes))
	for _, n := range cs.Notes {
		inCount[noteKey{n.Scope, n.Text, n.Key}] = true
	}
	var rows []actionRow
	shown := make(map[noteKey]bool) // store notes a row of the handler's own stands for
	h.mu.Lock()
	kept := h.made[:0]
	for _, m := range h.made {
		if !cs.Sampled && m.Time.Before(cs.Began) {
			continue // a count of every record that began after it read it: forget it
		}
		kept = append(kept, m)
		seen := 0
		for _, k := range m.Keys {
			if inCount[noteKey{m.Scope, m.Text, k}] {
				seen++
			}
		}
		if seen == len(m.Keys) {
			continue // the count's notes show it whole
		}
		for _, k := range m.Keys {
			shown[noteKey{m.Scope, m.Text, k}] = true
		}
		row := h.row(m.Time, m.Scope, m.Keys[0], m.Text)
		row.N, row.Here = len(m.Keys), true
		rows = append(rows, row)
	}
	clear(h.made[len(kept):])
	h.made = kept
	h.mu.Unlock()

	// The count's notes, those not stood for above, by scope and text, newest first.
	notes := make([]admin.ScopedNote, 0, len(cs.Notes))
	for _, n := range cs.Notes {
		if !shown[noteKey{n.Scope, n.Text, n.Key}] {
			notes = append(notes, n)
		}
	}
	slices.SortStableFunc(notes, func(a, b admin.ScopedNote) int {
		return cmp.Or(strings.Compare(a.Scope, b.Scope), strings.Compare(a.Text, b.Text), b.Time.Compare(a.Time))
	})
	// The count kept the newest maxNotes notes: a row whose oldest note is
	// within groupGap of the oldest kept may have lost older ones.
	var cut time.Time
	if len(cs.Notes) >= maxNotes {
		cut = cs.Notes[len(cs.Notes)-1].Time.Add(groupGap)
	}
	var last time.Time // the oldest note of the row being built
	for i, n := range notes {
		if i > 0 {
			if r := &rows[len(rows)-1]; r.Scope == n.Scope && r.Note == n.Text && last.Sub(n.Time) <= groupGap {
				r.N++
				r.AtLeast = !n.Time.After(cut)
				last = n.Time
				continue
			}
		}
		row := h.row(n.Time, n.Scope, n.Key, n.Text)
		row.N, row.AtLeast = 1, !n.Time.After(cut)
		rows = append(rows, row)
		last = n.Time
	}
	slices.SortStableFunc(rows, func(a, b actionRow) int { return b.Time.Compare(a.Time) })
	return rows[:min(len(rows), maxActionRows)]
}

func (h *Handler) row(t time.Time, scope string, key consumer.Key, text string) actionRow {
	op, actor, reason := parseNote(text)
	return actionRow{Time: t, Note: text, Op: op, Actor: actor, Reason: reason, Scope: scope, Key: key,
		Link: h.link("/record", url.Values{"scope": {scope}, "key": {string(key)}})}
}

// parseNote splits an operator note, "<op> by <actor>: <reason>", at the first
// colon after the actor's name; a note that does not read so is all reason.
func parseNote(text string) (op, actor, reason string) {
	for name := range ops {
		if rest, ok := strings.CutPrefix(text, name+" by "); ok {
			if actor, reason, ok := strings.Cut(rest, ": "); ok {
				return name, actor, reason
			}
		}
	}
	return "", "", text
}

// noteText is the note admin records for a change: "<op> by <actor>: <reason>"
// (package admin documents it).
func noteText(op consumer.OperatorOp, actor, reason string) string {
	return op.String() + " by " + strings.TrimSpace(actor) + ": " + strings.TrimSpace(reason)
}

// applied are the records a bulk action changed: the plan's targets it tried,
// but those it skipped.
func applied(p admin.Plan, rep admin.Report) []consumer.Key {
	ts := p.Targets()
	ts = ts[:max(len(ts)-rep.Left, 0)]
	skipped := make(map[consumer.Key]bool, len(rep.Skipped))
	for _, s := range rep.Skipped {
		skipped[s.Key] = true
	}
	var out []consumer.Key
	for _, t := range ts {
		if !skipped[t.Key] {
			out = append(out, t.Key)
		}
	}
	return out
}
