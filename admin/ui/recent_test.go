package ui

import (
	"fmt"
	"testing"
	"time"

	"github.com/idemkit/idemkit/admin"
	"github.com/idemkit/idemkit/consumer"
)

func note(scope, key, text string, t time.Time) admin.ScopedNote {
	return admin.ScopedNote{Scope: scope, Key: consumer.Key(key), OperatorNote: consumer.OperatorNote{Time: t, Text: text}}
}

func TestParseNote(t *testing.T) {
	for text, want := range map[string][3]string{
		"unstick by alice: replica-7 died":       {"unstick", "alice", "replica-7 died"},
		"rerun by bob: fixed: see INC-42":        {"rerun", "bob", "fixed: see INC-42"},
		"forget by ops bot: re-encoded payloads": {"forget", "ops bot", "re-encoded payloads"},
		"delete by alice: not an op":             {"", "", "delete by alice: not an op"},
		"unstick by alice without a colon":       {"", "", "unstick by alice without a colon"},
	} {
		if op, actor, reason := parseNote(text); [3]string{op, actor, reason} != want {
			t.Errorf("parseNote(%q) = %q, %q, %q, want %q", text, op, actor, reason, want)
		}
	}
}

// TestRecentGroups: a bulk action's notes are one row even when other notes of
// the same second come between them; the same note a minute and more apart is
// two rows; a row that may have lost notes to the count's limit says so.
func TestRecentGroups(t *testing.T) {
	h := &Handler{cfg: cfg{prefix: "/p"}}
	t0 := time.Date(2026, 11, 26, 20, 0, 0, 0, time.UTC)
	var notes []admin.ScopedNote
	for i := range 5 { // a bulk unstick, interleaved with a bulk rerun in the same second
		notes = append(notes, note("payments", fmt.Sprintf("a-%d", i), "unstick by alice: gone", t0),
			note("payments", fmt.Sprintf("b-%d", i), "rerun by bob: fixed", t0))
	}
	notes = append(notes,
		note("orders", "a-0", "unstick by alice: gone", t0.Add(-time.Second)), // another scope
		note("payments", "c-0", "unstick by alice: gone", t0.Add(-2*time.Minute)))
	rows := h.recent(counts{Stats: admin.Stats{Notes: notes}})
	type got struct {
		scope, op string
		n         int
		at        time.Time
	}
	want := []got{{"payments", "rerun", 5, t0}, {"payments", "unstick", 5, t0}, {"orders", "unstick", 1, t0.Add(-time.Second)},
		{"payments", "unstick", 1, t0.Add(-2 * time.Minute)}}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d: %+v", len(rows), len(want), rows)
	}
	for i, r := range rows {
		if g := (got{r.Scope, r.Op, r.N, r.Time}); g != want[i] || r.AtLeast || r.Here {
			t.Errorf("row %d: %+v, want %+v", i, r, want[i])
		}
	}
	if rows[0].Link != "/p/record?key=b-0&scope=payments" {
		t.Errorf("a row links to %q", rows[0].Link)
	}

	full := make([]admin.ScopedNote, maxNotes)
	for i := range full {
		full[i] = note("payments", fmt.Sprintf("k-%03d", i), "forget by alice: cleanup", t0.Add(-time.Duration(i)*time.Second))
	}
	rows = h.recent(counts{Stats: admin.Stats{Notes: full}})
	if len(rows) != 1 || rows[0].N != maxNotes || !rows[0].AtLeast {
		t.Errorf("a row of as many notes as the count keeps: %+v", rows)
	}
}

// TestRecentOwn: a handler's own change shows from memory until a count of
// every record that began after it has read it, and once: a row of its own
// stands for the count's notes of it, and goes when the count holds them all.
func TestRecentOwn(t *testing.T) {
	h := &Handler{cfg: cfg{prefix: "/p"}}
	t0 := time.Date(2026, 11, 26, 20, 0, 0, 0, time.UTC)
	text := "unstick by alice: gone"
	h.remember(made{Time: t0, Scope: "payments", Text: text, Keys: []consumer.Key{"a", "b", "c"}})
	h.remember(made{Time: t0, Scope: "payments", Text: "rerun by alice: nothing", Keys: nil}) // changed nothing: not kept

	// A full count that began before the change: the row comes from memory.
	old := counts{Stats: admin.Stats{Notes: []admin.ScopedNote{note("payments", "x", "forget by bob: old", t0.Add(-time.Hour))}},
		Full: true, Began: t0.Add(-time.Minute)}
	rows := h.recent(old)
	if len(rows) != 2 || !rows[0].Here || rows[0].N != 3 || rows[0].Key != "a" || rows[1].Here {
		t.Fatalf("before a count reads it: %+v", rows)
	}
	// A sample that read two of its three records: still one row, from memory.
	sample := counts{Stats: admin.Stats{Sampled: true, Notes: []admin.ScopedNote{note("payments", "a", text, t0), note("payments", "c", text, t0)}},
		Began: t0.Add(time.Minute)}
	if rows := h.recent(sample); len(rows) != 1 || !rows[0].Here || rows[0].N != 3 {
		t.Fatalf("a sample that read part of it: %+v", rows)
	}
	// A count that read all three: one row, from the store.
	all := counts{Stats: admin.Stats{Sampled: true, Notes: []admin.ScopedNote{note("payments", "a", text, t0), note("payments", "b", text, t0),
		note("payments", "c", text, t0)}}, Began: t0.Add(time.Minute)}
	if rows := h.recent(all); len(rows) != 1 || rows[0].Here || rows[0].N != 3 {
		t.Fatalf("a count that read it whole: %+v", rows)
	}
	if len(h.made) != 1 {
		t.Fatalf("a sample made the handler forget its change: %d kept", len(h.made))
	}
	// A count of every record that began after it: forgotten, whatever it holds.
	if rows := h.recent(counts{Began: t0.Add(time.Second)}); len(rows) != 0 || len(h.made) != 0 {
		t.Fatalf("after a count of every record: %+v, %d kept", rows, len(h.made))
	}
	for i := range maxMade + 5 {
		h.remember(made{Time: t0, Scope: "payments", Text: text, Keys: []consumer.Key{consumer.Key(fmt.Sprint(i))}})
	}
	if len(h.made) != maxMade || h.made[0].Keys[0] != consumer.Key(fmt.Sprint(maxMade+4)) {
		t.Errorf("the handler keeps %d changes, newest %v", len(h.made), h.made[0].Keys)
	}
}
