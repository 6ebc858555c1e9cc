package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/idemkit/idemkit/admin"
	"github.com/idemkit/idemkit/consumer"
	"github.com/spf13/cobra"
)

// bulkHelp is what unstick, forget and rerun --help say of --all.
const bulkHelp = `
With --all instead of a KEY, the command acts on every record the filters select
(--state, --older-than, --owner-prefix, --key-prefix, --lease-ran-out,
--error-kind, --error-contains) in --scope. Without --execute it changes nothing:
it prints how many records match and a few of them. Run it again with
--execute N, N being that count, to change them: it refuses (exit 4) when the
count differs from N (the records changed since: preview again) or exceeds --max.
Each record is changed only if it still holds the fence and state the preview
saw; one that moved on in between is left alone and reported as moved (exit 4
once the rest are done).`

// bulkFlags are the flags of unstick, forget and rerun --all.
type bulkFlags struct {
	all                      bool
	states                   []string
	olderThan                time.Duration
	ownerPrefix, keyPrefix   string
	leaseRanOut              bool
	errorKind, errorContains string
	execute, max, sample     int
}

// filterFlags name the flags that select records for --all.
var filterFlags = []string{"state", "older-than", "owner-prefix", "key-prefix", "lease-ran-out", "error-kind", "error-contains", "execute", "max", "sample"}

func (b *bulkFlags) register(c *cobra.Command) {
	f := c.Flags()
	f.BoolVar(&b.all, "all", false, "act on every record the filters select, not on one KEY (a preview unless --execute)")
	f.StringSliceVar(&b.states, "state", nil, "with --all: keep records in these states (default: every state the command changes)")
	f.DurationVar(&b.olderThan, "older-than", 0, "with --all: keep records in their state at least this long (e.g. 10m)")
	f.StringVar(&b.ownerPrefix, "owner-prefix", "", "with --all: keep records whose owner token starts with this (one process's claims share a prefix)")
	f.StringVar(&b.keyPrefix, "key-prefix", "", "with --all: keep records whose key starts with this")
	f.BoolVar(&b.leaseRanOut, "lease-ran-out", false, "with --all: keep started records whose lease has run out (their owner stopped renewing)")
	f.StringVar(&b.errorKind, "error-kind", "", "with --all: keep failed records that failed this way: permanent or exhausted")
	f.StringVar(&b.errorContains, "error-contains", "", "with --all: keep records whose last error contains this text")
	f.IntVar(&b.execute, "execute", 0, "with --all: change the records; give the count the preview printed")
	f.IntVar(&b.max, "max", admin.DefaultBulkMax, "with --all: refuse to change more records than this")
	f.IntVar(&b.sample, "sample", 5, "with --all: how many matching records the preview shows")
}

// check refuses filter flags without --all, and --all with a KEY or --fence.
func (b *bulkFlags) check(cmd *cobra.Command, args []string) error {
	if !b.all {
		for _, name := range filterFlags {
			if cmd.Flags().Changed(name) {
				return usagef("--%s goes with --all: add --all to act on every record the filters select, or drop it to change one KEY", name)
			}
		}
		return exactArgs(1, "KEY, or --all and filters")(cmd, args)
	}
	if cmd.Flags().Changed("fence") {
		return usagef("--fence goes with one KEY: --all changes each record at the fence its preview saw")
	}
	if len(args) > 0 {
		return usagef("%s --all takes no KEY, got %d arguments: drop them, or drop --all", cmd.CommandPath(), len(args))
	}
	return nil
}

func (b *bulkFlags) filter(scope string) admin.Filter {
	return admin.Filter{Scope: scope, States: b.states, OlderThan: b.olderThan, OwnerPrefix: b.ownerPrefix, KeyPrefix: b.keyPrefix,
		LeaseRanOut: b.leaseRanOut, ErrorKind: b.errorKind, ErrorContains: b.errorContains}
}

// describe names the filters, as the preview prints them.
func describe(f admin.Filter) string {
	var parts []string
	add := func(ok bool, format string, v any) {
		if ok {
			parts = append(parts, fmt.Sprintf(format, v))
		}
	}
	add(true, "state %s", strings.Join(f.States, ","))
	add(f.OlderThan > 0, "older than %v", f.OlderThan)
	add(f.OwnerPrefix != "", "owner prefix %q", f.OwnerPrefix)
	add(f.KeyPrefix != "", "key prefix %q", f.KeyPrefix)
	add(f.LeaseRanOut, "%s", "lease ran out")
	add(f.ErrorKind != "", "error kind %s", f.ErrorKind)
	add(f.ErrorContains != "", "error contains %q", f.ErrorContains)
	return strings.Join(parts, ", ")
}

// refusedError is a bulk action the command refused to execute, or one that
// left records alone because they moved on.
type refusedError struct{ msg string }

func (e refusedError) Error() string { return e.msg }

// bulk previews, and with --execute makes, op on every record b selects.
func (a *app) bulk(cmd *cobra.Command, op consumer.OperatorOp, b *bulkFlags, actor, reason string) error {
	name := op.String()
	store, err := a.writeStore(cmd.Context(), name+" --all")
	if err != nil {
		return err
	}
	in, err := a.inspector(cmd.Context(), store)
	if err != nil {
		return err
	}
	plan, err := in.Preview(cmd.Context(), admin.Bulk{Op: op, Filter: b.filter(a.scope), Actor: actor, Reason: reason, Max: b.max, Sample: b.sample})
	if err != nil {
		return a.storeErr(err)
	}
	if !cmd.Flags().Changed("execute") {
		return a.printBulkPreview(plan)
	}
	switch {
	case b.execute != plan.Count:
		return refusedError{fmt.Sprintf("%s --all --execute %d, but %d records match now: nothing changed; run it without --execute to see them, and confirm the count it prints",
			name, b.execute, plan.Count)}
	case plan.Count > plan.Bulk.Max:
		return refusedError{fmt.Sprintf("%s --all: %d records match, more than --max %d: nothing changed; narrow the filters, or give --max %d",
			name, plan.Count, plan.Bulk.Max, plan.Count)}
	}
	rep, err := in.Execute(cmd.Context(), plan)
	if perr := a.printBulkReport(plan, rep); perr != nil && err == nil {
		err = perr
	}
	if err != nil {
		return a.storeErr(err)
	}
	if n := rep.Moved + rep.WrongState + rep.NotFound; n > 0 {
		return refusedError{fmt.Sprintf("%s --all: %d of %d records were left alone (moved %d, wrong state %d, not found %d): they changed since the preview; preview again to see them",
			name, n, rep.Planned, rep.Moved, rep.WrongState, rep.NotFound)}
	}
	return nil
}

func (a *app) printBulkPreview(p admin.Plan) error {
	b := p.Bulk
	name := b.Op.String()
	if a.json {
		out := map[string]any{"op": name, "scope": p.Scope, "filter": describe(b.Filter), "count": p.Count, "max": b.Max,
			"examined": p.Examined, "executed": false, "sample": []recordJSON{}}
		for _, r := range p.Sample {
			out["sample"] = append(out["sample"].([]recordJSON), toJSON(r))
		}
		return a.printJSON(out)
	}
	fmt.Fprintf(a.out, "%s --all in scope %q (%s): %d records match\n", name, p.Scope, describe(b.Filter), p.Count)
	if p.Count == 0 {
		fmt.Fprintln(a.out, "nothing to do")
		return nil
	}
	if err := recordTable(a.out, p.Sample); err != nil {
		return err
	}
	if more := p.Count - len(p.Sample); more > 0 {
		fmt.Fprintf(a.out, "... and %d more\n", more)
	}
	if p.Count > b.Max {
		fmt.Fprintf(a.out, "nothing changed; more than --max %d match, so --execute would refuse: narrow the filters, or give --max %d\n", b.Max, p.Count)
		return nil
	}
	fmt.Fprintf(a.out, "nothing changed; to %s these %d records, run the same command with --execute %d\n", name, p.Count, p.Count)
	return nil
}

func (a *app) printBulkReport(p admin.Plan, rep admin.Report) error {
	if a.json {
		type skipped struct {
			Key      string `json:"key"`
			Why      string `json:"why"`
			State    string `json:"state"`
			Fence    int64  `json:"fence"`
			NowState string `json:"now_state,omitempty"`
			NowFence int64  `json:"now_fence,omitempty"`
		}
		out := map[string]any{"op": rep.Op, "scope": rep.Scope, "count": rep.Planned, "executed": true, "applied": rep.Applied,
			"moved": rep.Moved, "wrong_state": rep.WrongState, "not_found": rep.NotFound, "unknown": rep.Unknown, "left": rep.Left}
		list := []skipped{}
		for _, s := range rep.Skipped {
			list = append(list, skipped{string(s.Key), s.Why, s.State, s.Fence, s.NowState, s.NowFence})
		}
		out["skipped"] = list
		return a.printJSON(out)
	}
	fmt.Fprintf(a.out, "%s --all in scope %q: %d planned: %d applied, %d moved, %d wrong state, %d not found", rep.Op, rep.Scope, rep.Planned,
		rep.Applied, rep.Moved, rep.WrongState, rep.NotFound)
	if rep.Unknown+rep.Left > 0 {
		fmt.Fprintf(a.out, ", %d unknown, %d not tried", rep.Unknown, rep.Left)
	}
	fmt.Fprintln(a.out)
	if rep.Applied > 0 {
		fmt.Fprintf(a.out, "recorded in each: %s by %s: %s\n", rep.Op, strings.TrimSpace(p.Bulk.Actor), strings.TrimSpace(p.Bulk.Reason))
	}
	for _, s := range rep.Skipped {
		now := "gone"
		switch {
		case s.Why == "unknown":
			now = "its change may or may not have been made: inspect it"
		case s.NowState != "":
			now = fmt.Sprintf("now %s at fence %d", s.NowState, s.NowFence)
		}
		fmt.Fprintf(a.out, "  %s: %s (was %s at fence %d, %s)\n", s.Key, s.Why, s.State, s.Fence, now)
	}
	return nil
}
