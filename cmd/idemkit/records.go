package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/idemkit/idemkit/admin"
	"github.com/idemkit/idemkit/consumer"
	"github.com/spf13/cobra"
)

// recordJSON is a record as --json prints it.
type recordJSON struct {
	Scope       string        `json:"scope"`
	Key         string        `json:"key"`
	State       string        `json:"state"`
	Corrupt     string        `json:"corrupt,omitempty"`
	Fence       int64         `json:"fence"`
	Attempts    int           `json:"attempts"`
	Owner       string        `json:"owner,omitempty"`
	LeaseLeftMs int64         `json:"lease_left_ms"`
	Stale       bool          `json:"stale,omitempty"`
	AgeSeconds  float64       `json:"age_s"`
	Created     time.Time     `json:"created,omitzero"`
	Updated     time.Time     `json:"updated,omitzero"`
	Fingerprint string        `json:"fingerprint,omitempty"`
	Locked      bool          `json:"locked,omitempty"`
	Permanent   bool          `json:"permanent,omitempty"`
	ResultSize  int           `json:"result_size"`
	Dropped     string        `json:"result_dropped,omitempty"`
	TTLSeconds  float64       `json:"ttl_s"`
	History     []historyJSON `json:"history,omitempty"`
	Notes       []noteJSON    `json:"notes,omitempty"`
}

type historyJSON struct {
	Time    time.Time `json:"time"`
	Message string    `json:"message"`
}

// noteJSON is one operator note: who changed the record, how and why.
type noteJSON struct {
	Time time.Time `json:"time"`
	Text string    `json:"text"`
}

func toJSON(r admin.Record) recordJSON {
	j := recordJSON{Scope: r.Scope, Key: string(r.Key), State: r.State, Corrupt: r.Corrupt, Fence: r.Fence, Attempts: r.Attempts,
		Owner: r.Owner, LeaseLeftMs: r.LeaseLeft.Milliseconds(), Stale: r.Stale(), AgeSeconds: r.Age.Seconds(),
		Created: r.Created.UTC(), Updated: r.Updated.UTC(), Fingerprint: r.Fingerprint.String(), Locked: r.Locked,
		Permanent: r.Permanent, ResultSize: r.ResultSize, Dropped: r.Dropped, TTLSeconds: r.TTL.Seconds()}
	if r.Corrupt != "" {
		j.State = "corrupt"
	}
	for _, h := range r.History {
		j.History = append(j.History, historyJSON{h.Time.UTC(), h.Message})
	}
	for _, n := range r.Notes {
		j.Notes = append(j.Notes, noteJSON{n.Time.UTC(), n.Text})
	}
	return j
}

func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func short(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	if d >= time.Minute {
		return d.Truncate(time.Second).String()
	}
	return d.Truncate(time.Millisecond).String()
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n-3] + "..."
	}
	return s
}

func (a *app) inspectCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "inspect KEY",
		Short: "show one record: state, owner, fence, attempts, lease left, fingerprint, times, result size, error history and operator notes",
		Args:  exactArgs(1, "KEY (make one from business ids with: idemkit keygen NS PARTS...)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			in, err := a.inspector(cmd.Context(), nil)
			if err != nil {
				return err
			}
			r, err := in.Inspect(cmd.Context(), "", consumer.Key(args[0]))
			if err != nil && a.scope == "" && errors.Is(err, admin.ErrNotFound) {
				return fmt.Errorf("%w (%s)", err, noScope)
			}
			if err != nil {
				return a.storeErr(err)
			}
			if a.scope == "" {
				fmt.Fprintf(a.errOut, "idemkit: reading scope %q: %s\n", consumer.DefaultScope, noScope)
			}
			if a.json {
				return a.printJSON(toJSON(r))
			}
			tw := tabwriter.NewWriter(a.out, 0, 0, 2, ' ', 0)
			row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
			row("key", string(r.Key))
			row("scope", r.Scope)
			state := r.State
			if r.Stale() {
				state += " (lease ran out: the next delivery takes it over)"
			}
			row("state", state)
			row("fence", fmt.Sprint(r.Fence))
			row("attempts", fmt.Sprint(r.Attempts))
			row("owner", orDash(r.Owner))
			row("lease left", short(r.LeaseLeft))
			row("age", fmt.Sprintf("%s (since the last change)", r.Age))
			row("created", r.Created.UTC().Format(time.RFC3339))
			row("updated", r.Updated.UTC().Format(time.RFC3339))
			row("fingerprint", orDash(r.Fingerprint.String()))
			switch {
			case r.Dropped != "":
				row("result", fmt.Sprintf("not kept (%s)", r.Dropped))
			case r.State == "completed":
				row("result", fmt.Sprintf("%d bytes", r.ResultSize))
			default:
				row("result", "-")
			}
			row("ttl", short(r.TTL))
			entries(row, "history", len(r.History), func(i int) (time.Time, string) { return r.History[i].Time, r.History[i].Message })
			entries(row, "notes", len(r.Notes), func(i int) (time.Time, string) { return r.Notes[i].Time, r.Notes[i].Text })
			return tw.Flush()
		},
	}
}

// scopeRead names the scopes list and stats read.
func (a *app) scopeRead() string {
	if a.scope == "" {
		return "every scope (no --scope was given)"
	}
	return fmt.Sprintf("scope %q", a.scope)
}

// entries shows n timed texts, newest first, under label ("-" when there are none).
func entries(row func(k, v string), label string, n int, at func(i int) (time.Time, string)) {
	if n == 0 {
		row(label, "-")
	}
	for i := 0; i < n; i++ {
		t, text := at(i)
		if i > 0 {
			label = ""
		}
		row(label, t.UTC().Format(time.RFC3339)+"  "+text)
	}
}

func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef("%s takes %s, got %d arguments", cmd.CommandPath(), what, len(args))
		}
		return nil
	}
}

func (a *app) listCmd() *cobra.Command {
	var states []string
	var olderThan time.Duration
	var limit, count int
	var cursor string
	c := &cobra.Command{
		Use:   "list",
		Short: "list records by state, age and scope, with bounded scans (on Redis: SCAN on every primary, never KEYS); every scope unless --scope",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			in, err := a.inspector(cmd.Context(), nil)
			if err != nil {
				return err
			}
			q := admin.Query{Scope: a.scope, States: states, OlderThan: olderThan, Limit: limit, Cursor: cursor, ScanCount: count,
				MaxExamined: 1 << 62}
			page, err := in.List(cmd.Context(), q)
			if err != nil {
				return a.storeErr(err)
			}
			if a.json {
				out := struct {
					Scope   string       `json:"scope"` // "": every scope
					Records []recordJSON `json:"records"`
					Next    string       `json:"next,omitempty"`
				}{Scope: a.scope, Records: []recordJSON{}, Next: page.Next}
				for _, r := range page.Records {
					out.Records = append(out.Records, toJSON(r))
				}
				return a.printJSON(out)
			}
			if err := recordTable(a.out, page.Records); err != nil {
				return err
			}
			fmt.Fprintf(a.errOut, "%d records in %s", len(page.Records), a.scopeRead())
			if page.Next != "" {
				fmt.Fprintf(a.errOut, "; more with --cursor '%s'", page.Next)
			}
			fmt.Fprintln(a.errOut)
			return nil
		},
	}
	f := c.Flags()
	f.StringSliceVar(&states, "state", nil, "keep records in these states: started, completed, failed, retry, forgotten, corrupt (repeat or comma-separate)")
	f.DurationVar(&olderThan, "older-than", 0, "keep records in their state at least this long (e.g. 10m)")
	f.IntVar(&limit, "limit", 100, "stop after this many records; --cursor continues")
	f.StringVar(&cursor, "cursor", "", "continue a listing where it stopped")
	f.IntVar(&count, "scan-count", 1000, "records one scan step examines: SCAN's COUNT on Redis, a page on PostgreSQL and DynamoDB")
	return c
}

// recordTable prints records one a line, a started record whose lease ran out
// marked with a star.
func recordTable(w io.Writer, recs []admin.Record) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCOPE\tKEY\tSTATE\tAGE\tFENCE\tATTEMPTS\tLEASE LEFT\tOWNER\tLAST ERROR")
	for _, r := range recs {
		state := r.State
		if r.Corrupt != "" {
			state = "corrupt"
		}
		if r.Stale() {
			state += "*"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", r.Scope, r.Key, state, r.Age, r.Fence, r.Attempts,
			short(r.LeaseLeft), orDash(r.Owner), orDash(oneLine(r.Error+r.Corrupt, 60)))
	}
	return tw.Flush()
}

func (a *app) statsCmd() *cobra.Command {
	var maxRecords, count int
	c := &cobra.Command{
		Use:   "stats",
		Short: "count records by state, with the oldest started one (sampled past --max-records, and says so)",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			in, err := a.inspector(cmd.Context(), nil)
			if err != nil {
				return err
			}
			st, err := in.Stats(cmd.Context(), admin.StatsQuery{Scope: a.scope, MaxRecords: maxRecords, ScanCount: count})
			if err != nil {
				return a.storeErr(err)
			}
			if a.json {
				out := map[string]any{"scope": st.Scope, "counts": st.Counts, "records": st.Records, "stale": st.Stale,
					"sampled": st.Sampled, "keys_on_server": st.KeysOnServer, "elapsed_ms": st.Elapsed.Milliseconds()}
				if st.OldestStarted != nil {
					out["oldest_started"] = toJSON(*st.OldestStarted)
				}
				return a.printJSON(out)
			}
			fmt.Fprintf(a.out, "records in %s", a.storeName())
			if a.backend != backendPostgres { // PostgreSQL keeps no prefix
				fmt.Fprintf(a.out, " under prefix %q", a.prefix)
			}
			fmt.Fprintf(a.out, ", %s", a.scopeRead())
			if st.Sampled {
				fmt.Fprintf(a.out, " (SAMPLED: the first %d records the scan met; raise --max-records for a full count)", st.Records)
			}
			fmt.Fprintln(a.out)
			tw := tabwriter.NewWriter(a.out, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "STATE\tRECORDS")
			for _, s := range append(append([]string{}, admin.States...), "corrupt") {
				fmt.Fprintf(tw, "%s\t%d\n", s, st.Counts[s])
			}
			fmt.Fprintf(tw, "total\t%d\n", st.Records)
			if err := tw.Flush(); err != nil {
				return err
			}
			fmt.Fprintf(a.out, "started with their lease run out: %d\n", st.Stale)
			if o := st.OldestStarted; o != nil {
				fmt.Fprintf(a.out, "oldest started: %s/%s, %s, owner %s, lease left %s\n", o.Scope, o.Key, o.Age, o.Owner, short(o.LeaseLeft))
			}
			if st.KeysOnServer >= 0 {
				fmt.Fprintf(a.out, "keys on the server(s), all programs': %d; counted in %s\n", st.KeysOnServer, st.Elapsed.Truncate(time.Millisecond))
			}
			return nil
		},
	}
	c.Flags().IntVar(&maxRecords, "max-records", 1_000_000, "stop counting after this many records (the result then says SAMPLED)")
	c.Flags().IntVar(&count, "scan-count", 1000, "records one scan step examines: SCAN's COUNT on Redis, a page on PostgreSQL and DynamoDB")
	return c
}

type changeFunc func(*admin.Inspector, context.Context, admin.Change) (admin.Result, error)

func (a *app) changeCmd(op consumer.OperatorOp, short string, fn changeFunc) *cobra.Command {
	name := op.String()
	var reason, actor string
	var fence int64
	var bulk bulkFlags
	c := &cobra.Command{
		Use:   name + " (KEY | --all [filters] [--execute N]) --reason TEXT",
		Short: short,
		Long: short + ".\n\n" + name + ` changes records, so it needs the service's --scope [IDEMKIT_SCOPE]
and refuses the default scope "default" (exit 2).
` + bulkHelp,
		Args: bulk.check,
		RunE: func(cmd *cobra.Command, args []string) error {
			if strings.TrimSpace(reason) == "" {
				return usagef("%s needs --reason: say why; it is recorded in the record's history", name)
			}
			if actor == "" {
				return usagef("%s needs --actor (or $USER): say who makes the change", name)
			}
			if bulk.all {
				return a.bulk(cmd, op, &bulk, actor, reason)
			}
			store, err := a.writeStore(cmd.Context(), name)
			if err != nil {
				return err
			}
			in, err := a.inspector(cmd.Context(), store)
			if err != nil {
				return err
			}
			res, err := fn(in, cmd.Context(), admin.Change{Key: consumer.Key(args[0]), Actor: actor, Reason: reason, Fence: fence})
			if err != nil {
				return a.storeErr(err)
			}
			if a.json {
				return a.printJSON(map[string]any{"op": res.Op, "scope": res.Scope, "key": string(res.Key), "before": res.Before,
					"after": res.After, "fence": res.Fence, "new_fence": res.NewFence, "lease_left_ms": res.LeaseLeft.Milliseconds(), "note": res.Note})
			}
			fmt.Fprintf(a.out, "%s %s/%s: %s -> %s, fence %d -> %d\nrecorded: %s\n", res.Op, res.Scope, res.Key, res.Before, res.After,
				res.Fence, res.NewFence, res.Note)
			if res.LeaseLeft > 0 {
				fmt.Fprintf(a.out, "note: its owner's lease had %s left; if that owner is alive, it learns at its next renewal (a third of its lease) and may overlap the next attempt until then\n",
					res.LeaseLeft.Truncate(time.Second))
			}
			return nil
		},
	}
	c.Flags().StringVar(&reason, "reason", "", "why (required; recorded in the record's history)")
	c.Flags().StringVar(&actor, "actor", env("USER", ""), "who (default $USER)")
	c.Flags().Int64Var(&fence, "fence", 0, "make the change only if the record still holds this fence (from inspect)")
	bulk.register(c)
	return c
}
