package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/idemkit/idemkit/internal/benchkit"
)

// noopSlices runs the raw multiple-ack consumer and the no-op worker in pairs of
// adjacent runs, as stallSlices runs its two lanes (each on a queue filled right
// before it, the pairs alternating which goes first), and judges the no-op target
// by the median of the pairs' rate ratios: the A B B A table above shares one
// drift between two slices of each lane, a pair shares it between one of each,
// closer together.
func (b *bench) noopSlices(pairs int) error {
	if pairs < 1 {
		return nil
	}
	raw, noop := &benchkit.Lane{Name: "slices: raw, multiple-ack"}, &benchkit.Lane{Name: "slices: worker, no-op handler"}
	var ratios, cpuRatios []float64
	fmt.Printf("\n  no-op, paired slices (%d pairs, each slice a whole run of its lane on a queue filled right before it):\n", pairs)
	for k := 0; k < pairs; k++ {
		type slice struct {
			lane    *benchkit.Lane
			run     func(queue string) error
			elapsed time.Duration
			goCPU   time.Duration
		}
		slices := []*slice{
			{lane: raw, run: func(q string) error { return b.raw(q, 256, true) }},
			{lane: noop, run: func(q string) error { return b.worker(q, 0, "", 0) }},
		}
		order := "raw first"
		if k%2 == 1 {
			slices[0], slices[1] = slices[1], slices[0]
			order = "worker first"
		}
		for _, sl := range slices {
			q, err := b.queue(false)
			if err != nil {
				return err
			}
			e0, g0 := sl.lane.Elapsed, sl.lane.GoCPU
			err = b.env.Measure(sl.lane, b.n, func() error { return sl.run(q.Queue) })
			sl.elapsed, sl.goCPU = sl.lane.Elapsed-e0, sl.lane.GoCPU-g0
			_ = q.Delete(b.conn)
			err = errors.Join(err, b.forget(q.Queue))
			if err != nil {
				return err
			}
		}
		if k%2 == 1 {
			slices[0], slices[1] = slices[1], slices[0]
		}
		r, w := slices[0], slices[1]
		ratio := r.elapsed.Seconds() / w.elapsed.Seconds() // the worker's rate over the raw consumer's
		ratios = append(ratios, ratio)
		cpuRatios = append(cpuRatios, w.goCPU.Seconds()/r.goCPU.Seconds())
		us := func(d time.Duration) float64 { return d.Seconds() * 1e6 / float64(b.n) }
		fmt.Printf("    pair %d (%s): the worker %.0f msgs/s against %.0f:  %.2fx;  Go CPU/msg %.1f against %.1f us\n",
			k+1, order, float64(b.n)/w.elapsed.Seconds(), float64(b.n)/r.elapsed.Seconds(), ratio, us(w.goCPU), us(r.goCPU))
	}
	benchkit.Table(os.Stdout, raw, raw, noop)
	m := benchkit.Median(ratios)
	fmt.Printf("  no-op worker >= 0.75x the raw multiple-ack consumer, paired slices: median of %d pair ratios:  %.2fx  %s; sums:  %.2fx\n",
		len(ratios), m, benchkit.Verdict(m >= 0.75), noop.Rate()/raw.Rate())
	fmt.Printf("  no-op, paired slices: Go CPU per message, median of %d pair ratios:  %.2fx the raw consumer's\n",
		len(cpuRatios), benchkit.Median(cpuRatios))
	return nil
}
