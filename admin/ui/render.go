package ui

import (
	"bytes"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idemkit/idemkit/admin"
)

// view is what every page's template gets: the layout's fields and the page's
// own data in D.
type view struct {
	P        string // the prefix links start with
	Title    string
	Nav      string // which menu entry is current
	CanWrite bool
	Refresh  int // seconds; 0: no auto-refresh
	D        any
}

func (h *Handler) render(w http.ResponseWriter, name string, status int, v view) {
	v.P, v.CanWrite = h.cfg.prefix, h.cfg.actor != nil
	var buf bytes.Buffer
	if err := h.pages[name].Execute(&buf, v); err != nil {
		h.cfg.logger.Error("ui: render", "page", name, "err", err)
		http.Error(w, "ui: the page could not be rendered", http.StatusInternalServerError)
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", "text/html; charset=utf-8")
	hd.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// fail shows msg on the error page with status.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	h.render(w, "error", status, view{Title: http.StatusText(status), D: errData{status, msg, h.link("/", nil)}})
}

// errData is what the error page shows.
type errData struct {
	Status  int
	Message string
	Back    template.URL
}

var funcs = template.FuncMap{
	"dur":     short,
	"age":     age,
	"when":    when,
	"line":    oneLine,
	"state":   stateLabel,
	"states":  func() []string { return append(append([]string{}, admin.States...), "corrupt") },
	"kinds":   func() []string { return []string{admin.KindPermanent, admin.KindExhausted} },
	"orDash":  orDash,
	"percent": func(n, of int) string { return fmt.Sprintf("%.1f%%", 100*float64(n)/float64(max(of, 1))) },
	"count":   func(m map[string]int, k string) int { return m[k] },
	"join":    strings.Join,
	"add":     func(a, b int) int { return a + b },
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

func age(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	return d.Truncate(time.Second).String()
}

func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// oneLine shows s on one line of at most n bytes (cut on a rune boundary).
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= n {
		return s
	}
	cut := n - 3
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// stateLabel is a record's state as `idemkit list` shows it: corrupt for a
// value that is no record, and a star on a started record whose lease ran out.
func stateLabel(r admin.Record) string {
	s := r.State
	if r.Corrupt != "" {
		s = "corrupt"
	}
	if r.Stale() {
		s += "*"
	}
	return s
}

// link is a path under the prefix with a query, for templates.
func (h *Handler) link(path string, q url.Values) template.URL {
	u := h.cfg.prefix + path
	if enc := q.Encode(); enc != "" {
		u += "?" + enc
	}
	return template.URL(u) //nolint:gosec // the prefix is validated and the query encoded
}
