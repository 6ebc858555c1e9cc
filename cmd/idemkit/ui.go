package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/idemkit/idemkit/admin/ui"
	"github.com/spf13/cobra"
)

// uiHelp is what ui --help says.
const uiHelp = `ui serves the operator web UI (package admin/ui) on --listen: the overview,
the records with their filters, each record's detail, bulk actions and replay
plans (--plans DIR, the files idemkit plan --out wrote), over the store the flags
pick. It runs until SIGINT or SIGTERM.

It is read-only unless --allow-changes is given. Then unstick, forget and rerun
are offered, each recorded with --actor (default $USER) and the reason typed in
the page; they need the service's --scope, as the commands that change records
do, and the UI must listen on a loopback address: this command has no
authentication of its own. To offer changes to a team, mount ui.New in a service
of yours behind its authentication, with ui.WithActor naming the person.`

func (a *app) uiCmd() *cobra.Command {
	var listen, actor, plans string
	var allow bool
	var refresh, countEvery time.Duration
	var sample int
	c := &cobra.Command{
		Use:   "ui [--listen ADDR] [--allow-changes] [--plans DIR]",
		Short: "serve the operator web UI: overview, records, record detail, bulk actions, replay plans (read-only unless --allow-changes)",
		Long:  uiHelp,
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts := []ui.Option{ui.WithRefresh(refresh), ui.WithSample(sample), ui.WithCountEvery(countEvery)}
			if plans != "" {
				if st, err := os.Stat(plans); err != nil || !st.IsDir() {
					return usagef("--plans %q: give a directory that holds the files idemkit plan --out wrote", plans)
				}
				opts = append(opts, ui.WithPlans(os.DirFS(plans)))
			}
			var store recordStore
			var err error
			mode := "read-only"
			if !allow {
				store, err = a.readStore(cmd.Context())
			} else {
				if actor == "" {
					return usagef("--allow-changes needs --actor (or $USER): say who makes the changes")
				}
				if err := loopback(listen); err != nil {
					return err
				}
				store, err = a.writeStore(cmd.Context(), "ui --allow-changes")
				who := actor
				opts = append(opts, ui.WithActor(func(*http.Request) (string, error) { return who, nil }))
				mode = fmt.Sprintf("changes allowed, recorded as %s in scope %q", who, a.scope)
			}
			if err != nil {
				return err
			}
			in, err := a.inspector(cmd.Context(), store)
			if err != nil {
				return err
			}
			h, err := ui.New(in, opts...)
			if err != nil {
				return usageError{err}
			}
			defer h.Close()
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return usagef("--listen %q: %v", listen, err)
			}
			srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute, WriteTimeout: 5 * time.Minute}
			fmt.Fprintf(a.errOut, "idemkit: serving the UI of %s on http://%s/ (%s); stop with Ctrl-C\n", a.storeName(), ln.Addr(), mode)
			done := make(chan error, 1)
			go func() { done <- srv.Serve(ln) }()
			select {
			case err := <-done:
				return err
			case <-cmd.Context().Done():
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err = srv.Shutdown(ctx)
			if serr := <-done; !errors.Is(serr, http.ErrServerClosed) && err == nil {
				err = serr
			}
			return err
		},
	}
	f := c.Flags()
	f.StringVar(&listen, "listen", env("IDEMKIT_UI_LISTEN", "127.0.0.1:8080"), "address to serve the UI on [IDEMKIT_UI_LISTEN]")
	f.BoolVar(&allow, "allow-changes", false, "offer unstick, forget and rerun (needs --scope and a loopback --listen)")
	f.StringVar(&actor, "actor", env("USER", ""), "who makes the changes, recorded in each (default $USER)")
	f.StringVar(&plans, "plans", "", "a directory of replay plans (idemkit plan --out) to show, read-only")
	f.DurationVar(&refresh, "refresh", 15*time.Second, "how often the overview reloads itself; 0 turns it off")
	f.IntVar(&sample, "sample", 2000, "the most records one view of the overview counts itself; a larger store is counted in full in the background")
	f.DurationVar(&countEvery, "count-every", time.Minute, "how old the overview's background full count may get before a view starts the next; 0: no full counts, samples only")
	return c
}

// loopback refuses an address that is not a loopback one.
func loopback(listen string) error {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return usagef("--listen %q: give host:port: %v", listen, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return usagef("--listen %q with --allow-changes: this command has no authentication, so it serves changes on a loopback address only (127.0.0.1:PORT); mount ui.New behind your own authentication to offer them further",
		listen)
}
