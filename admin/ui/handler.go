package ui

import (
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/idemkit/idemkit/admin"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// contentSecurityPolicy allows the page's own script and style files and
// nothing else: no inline script or style, no other origin, no framing.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// Handler serves the operator UI. It is safe for concurrent use.
type Handler struct {
	in    *admin.Inspector
	cfg   cfg
	pages map[string]*template.Template
	serve http.Handler
	count *counter

	mu   sync.Mutex
	made []made // the changes made through this handler, newest first, at most maxMade
}

// maxMade is how many of its own changes a handler keeps until a count of the
// store has read them back.
const maxMade = 50

// New returns the UI over in. It is read-only unless WithActor is given. With
// WithActor, in's store must have the service's scope: New refuses a store on
// consumer.DefaultScope with an error matching consumer.ErrDefaultScope, as the
// broker adapters and the idemkit commands that change records do.
func New(in *admin.Inspector, opts ...Option) (*Handler, error) {
	if in == nil {
		return nil, errors.New("ui: nil inspector: pass the one admin.New returns")
	}
	c := cfg{refresh: 15 * time.Second, countEvery: time.Minute}
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("ui: nil option")
		}
		o.apply(&c)
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	if err := in.Settings().CheckScope(); err != nil && c.actor != nil {
		return nil, fmt.Errorf("ui: WithActor needs the service's scope, since a change with no scope named (a bulk action with no scope filter) acts in the store's; "+
			"leave WithActor out for a read-only UI, which reads every scope: %w", err)
	}
	h := &Handler{in: in, cfg: c, pages: make(map[string]*template.Template), count: newCounter(in, c.countEvery)}
	for _, name := range []string{"overview", "records", "record", "done", "preview", "plans", "plan", "error"} {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, err
		}
		h.pages[name] = t
	}
	static, _ := fs.Sub(staticFS, "static")
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", h.overview)
	mux.HandleFunc("GET /records", h.records)
	mux.HandleFunc("GET /record", h.record)
	mux.HandleFunc("POST /record/{op}", h.change)
	mux.HandleFunc("POST /bulk/preview", h.bulkPreview)
	mux.HandleFunc("POST /bulk/execute", h.bulkExecute)
	mux.HandleFunc("GET /plans", h.plans)
	mux.HandleFunc("GET /plan", h.plan)
	mux.Handle("GET /static/", http.StripPrefix("/static/", staticFiles(static)))
	mux.HandleFunc("GET /robots.txt", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("User-agent: *\nDisallow: /\n"))
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		h.fail(w, r, http.StatusNotFound, "There is no page at this address.")
	})
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.fail(w, r, http.StatusForbidden, "Refused: the request came from another origin. Changes are made only from this UI's own pages.")
	}))
	var inner http.Handler = cop.Handler(mux)
	if c.prefix != "" {
		inner = http.StripPrefix(c.prefix, inner)
	}
	h.serve = inner
	return h, nil
}

// Close stops the overview's background count, if one runs, and waits for it.
// The handler goes on serving; views no longer start background counts.
func (h *Handler) Close() error {
	h.count.close()
	return nil
}

// ServeHTTP serves the pages under the handler's prefix.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", contentSecurityPolicy)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("X-Robots-Tag", "noindex, nofollow")
	if h.cfg.prefix != "" && r.URL.Path == h.cfg.prefix {
		http.Redirect(w, r, h.cfg.prefix+"/", http.StatusMovedPermanently)
		return
	}
	if h.cfg.prefix != "" && !strings.HasPrefix(r.URL.Path, h.cfg.prefix+"/") {
		h.fail(w, r, http.StatusNotFound, "There is no page at this address: the UI is mounted under "+h.cfg.prefix+"/.")
		return
	}
	h.serve.ServeHTTP(w, r)
}

func staticFiles(fsys fs.FS) http.Handler {
	files := http.FileServerFS(fsys)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "" || strings.HasSuffix(r.URL.Path, "/") {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Cache-Control", "public, max-age=300")
		files.ServeHTTP(w, r)
	})
}
