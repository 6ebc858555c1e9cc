package main

// Paired rounds: the adapter's own cost is a difference of three lanes' Go CPU per
// record (no-op adapter minus ExecuteBatch alone minus raw franz-go), and on a
// shared machine one lane's run can cost several times its usual CPU per record
// (the raw lane, 20 ms of CPU in all, is the most exposed). So the lanes the
// difference is made of run again, back to back, in further rounds of each
// repetition, every round in another order, each run the same work as the lane's
// run in the table (a fresh group over the whole topic, the same keys); the
// difference is taken within each round and the median over rounds is the figure
// judged, beside the mean over rounds and the table's single runs.

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/idemkit/idemkit/internal/benchkit"
)

// comparedLanes are the lanes the adapter's own cost is a difference of, in the
// order of the table.
var comparedLanes = []string{"raw", "batch", "pipeline", "noop"}

var comparedNames = map[string]string{
	"raw": "raw franz-go", "batch": "ExecuteBatch alone", "pipeline": "Pipeline alone", "noop": "adapter, no-op",
}

// rounds holds the compared lanes' Go CPU per record, by round.
type rounds struct {
	ids []string    // the compared lanes this run measures
	cpu [][]float64 // by round, then by index in ids: Go CPU us per record
	n   int         // rounds wanted
}

func newRounds(o opts) *rounds {
	r := &rounds{n: o.rounds}
	for _, id := range comparedLanes {
		if o.runs(id) {
			r.ids = append(r.ids, id)
		}
	}
	// Without the no-op lane, raw and one engine lane there is no difference to take.
	if !slices.Contains(r.ids, "noop") || !slices.Contains(r.ids, "raw") || len(r.ids) < 3 {
		r.ids, r.n = nil, 1
	}
	return r
}

// add records lane id's Go CPU per record in round i (0: the table's run).
func (r *rounds) add(i int, id string, l *benchkit.Lane) {
	j := slices.Index(r.ids, id)
	if j < 0 {
		return
	}
	for len(r.cpu) <= i {
		r.cpu = append(r.cpu, make([]float64, len(r.ids)))
	}
	r.cpu[i][j] = l.PerMsg(l.GoCPU)
}

// moreRounds runs rounds 2 and on of the compared lanes, round k in the order of
// the table rotated by k-1, so that every lane runs first, last and between.
func (b *bench) moreRounds(r *rounds) error {
	fns := map[string]func() error{
		"raw":      b.raw,
		"batch":    b.batch,
		"pipeline": b.pipeline,
		"noop":     func() error { return b.adapter(0, "", 0) },
	}
	for k := 1; k < r.n; k++ {
		for j := range r.ids {
			id := r.ids[(j+k)%len(r.ids)]
			l := &benchkit.Lane{Name: id}
			if err := b.measure(l, fns[id]); err != nil {
				return err
			}
			r.add(k, id, l)
		}
	}
	return nil
}

// diff is, by round, lane "noop" minus engine minus "raw".
func (r *rounds) diff(engine string) []float64 {
	e, noop, raw := slices.Index(r.ids, engine), slices.Index(r.ids, "noop"), slices.Index(r.ids, "raw")
	if e < 0 {
		return nil
	}
	out := make([]float64, len(r.cpu))
	for i, c := range r.cpu {
		out[i] = c[noop] - c[e] - c[raw]
	}
	return out
}

func (r *rounds) print(w io.Writer) {
	if len(r.cpu) < 2 {
		return
	}
	fmt.Fprintf(w, "\n  paired rounds: %d runs of each lane below per repetition (round 1 is the table's), back to back,\n", len(r.cpu))
	fmt.Fprintf(w, "  each round in another order; Go CPU us/record by round, then median and mean over rounds:\n")
	row := func(name string, v []float64) {
		fmt.Fprintf(w, "    %-38s %s   median %6.2f  mean %6.2f\n", name, nums(v), benchkit.Median(v), benchkit.Mean(v))
	}
	for j, id := range r.ids {
		v := make([]float64, len(r.cpu))
		for i, c := range r.cpu {
			v[i] = c[j]
		}
		row(comparedNames[id], v)
	}
	own, over := r.diff("batch"), r.diff("pipeline")
	if own != nil {
		row("own: no-op - ExecuteBatch - raw", own)
	}
	if over != nil {
		row("over its engine: no-op - Pipeline - raw", over)
	}
	if own != nil {
		m := benchkit.Median(own)
		fmt.Fprintf(w, "  adapter's own Go CPU, paired rounds (median of %d) <= 3 us:  %.2f us  %s  (mean %.2f us; the table's one run: %.2f us)\n",
			len(own), m, benchkit.Verdict(m <= 3), benchkit.Mean(own), own[0])
	}
	if over != nil {
		fmt.Fprintf(w, "  adapter over its engine, paired rounds (median of %d):       %.2f us  (mean %.2f us; the table's one run: %.2f us)\n",
			len(over), benchkit.Median(over), benchkit.Mean(over), over[0])
	}
}

func nums(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprintf("%6.2f", x)
	}
	return strings.Join(s, " ")
}
