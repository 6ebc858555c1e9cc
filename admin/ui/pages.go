package ui

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idemkit/idemkit/admin"
	"github.com/idemkit/idemkit/consumer"
)

// storeFailed shows a store error, or a bad argument's message.
func (h *Handler) storeFailed(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, admin.ErrInvalid), errors.Is(err, consumer.ErrInvalidKey):
		h.fail(w, r, http.StatusBadRequest, err.Error())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		h.fail(w, r, http.StatusGatewayTimeout, "The store did not answer in time: "+err.Error())
	default:
		h.fail(w, r, http.StatusBadGateway, "The store failed: "+err.Error())
	}
}

type scopeRow struct {
	Scope  string
	Counts map[string]int
	Total  int
}

func (h *Handler) overview(w http.ResponseWriter, r *http.Request) {
	cs, err := h.count.get(r.Context(), h.cfg.sample)
	st := cs.Stats
	if err != nil {
		h.storeFailed(w, r, err)
		return
	}
	var rows []scopeRow
	for scope, counts := range st.ByScope {
		row := scopeRow{Scope: scope, Counts: counts}
		for _, n := range counts {
			row.Total += n
		}
		rows = append(rows, row)
	}
	slices.SortFunc(rows, func(a, b scopeRow) int { return strings.Compare(a.Scope, b.Scope) })
	var oldest template.URL
	if o := st.OldestStarted; o != nil {
		oldest = h.link("/record", url.Values{"scope": {o.Scope}, "key": {string(o.Key)}})
	}
	h.render(w, "overview", http.StatusOK, view{Title: "Overview", Nav: "overview", Refresh: int(h.cfg.refresh / time.Second), D: struct {
		Stats      admin.Stats
		Counts     counts
		Sample     int
		CountEvery time.Duration
		Scopes     []scopeRow
		OldestLink template.URL
		Actions    []actionRow
		StaleLink  template.URL
		KindLink   func(string) template.URL
		ScopeLink  func(string, string) template.URL
	}{st, cs, h.cfg.sample, h.cfg.countEvery, rows, oldest, h.recent(cs), h.link("/records", url.Values{"stale": {"1"}}),
		func(k string) template.URL { return h.link("/records", url.Values{"kind": {k}}) },
		func(scope, state string) template.URL {
			return h.link("/records", url.Values{"scope": {scope}, "state": {state}})
		}}})
}

// filter is the Records page's filter, as its query string gives it.
type filter struct {
	Scope, State, Older, Kind, Owner, Key string
	Stale                                 bool
	Limit                                 int
	Cursor                                string
}

func (f filter) values() url.Values {
	v := url.Values{}
	set := func(k, s string) {
		if s != "" {
			v.Set(k, s)
		}
	}
	set("scope", f.Scope)
	set("state", f.State)
	set("older", f.Older)
	set("kind", f.Kind)
	set("owner", f.Owner)
	set("key", f.Key)
	if f.Stale {
		v.Set("stale", "1")
	}
	return v
}

// maxFilterText is the most bytes a filter's text field may hold.
const maxFilterText = 1024

func parseFilter(get func(string) string) (filter, error) {
	f := filter{Scope: get("scope"), State: get("state"), Older: strings.TrimSpace(get("older")), Kind: get("kind"),
		Owner: get("owner"), Key: get("key"), Stale: get("stale") == "1", Cursor: get("cursor")}
	for _, s := range []string{f.Scope, f.Owner, f.Key, f.Cursor} {
		if len(s) > maxFilterText || !utf8.ValidString(s) {
			return f, fmt.Errorf("a filter field of %d bytes: give at most %d bytes of UTF-8", len(s), maxFilterText)
		}
	}
	if f.State != "" && f.State != "corrupt" && !slices.Contains(admin.States, f.State) {
		return f, fmt.Errorf("state %q: pick one of %s or corrupt", f.State, strings.Join(admin.States, ", "))
	}
	if f.Kind != "" && f.Kind != admin.KindPermanent && f.Kind != admin.KindExhausted {
		return f, fmt.Errorf("error kind %q: pick %s or %s", f.Kind, admin.KindPermanent, admin.KindExhausted)
	}
	if _, err := f.olderThan(); err != nil {
		return f, err
	}
	f.Limit = 100
	if l := get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 {
			return f, fmt.Errorf("limit %q: give a number of records, 1 to %d", l, maxPage)
		}
		f.Limit = min(n, maxPage)
	}
	return f, nil
}

func (f filter) olderThan() (time.Duration, error) {
	if f.Older == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(f.Older)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("age %q: give a duration such as 90s, 10m or 2h", f.Older)
	}
	return d, nil
}

func (f filter) query() admin.Query {
	older, _ := f.olderThan()
	q := admin.Query{Scope: f.Scope, OlderThan: older, OwnerPrefix: f.Owner, KeyPrefix: f.Key, LeaseRanOut: f.Stale,
		ErrorKind: f.Kind, Limit: f.Limit, Cursor: f.Cursor}
	if f.State != "" {
		q.States = []string{f.State}
	}
	return q
}

// bulkFilter is the admin.Filter of a bulk action on the records f selects.
func (f filter) bulkFilter() admin.Filter {
	older, _ := f.olderThan()
	bf := admin.Filter{Scope: f.Scope, OlderThan: older, OwnerPrefix: f.Owner, KeyPrefix: f.Key, LeaseRanOut: f.Stale, ErrorKind: f.Kind}
	if f.State != "" {
		bf.States = []string{f.State}
	}
	return bf
}

// describe names the filter's fields that are set.
func (f filter) describe() string {
	var parts []string
	add := func(ok bool, s string) {
		if ok {
			parts = append(parts, s)
		}
	}
	add(f.Scope != "", fmt.Sprintf("scope %q", f.Scope))
	add(f.State != "", "state "+f.State)
	add(f.Older != "", "older than "+f.Older)
	add(f.Kind != "", "error kind "+f.Kind)
	add(f.Owner != "", fmt.Sprintf("owner prefix %q", f.Owner))
	add(f.Key != "", fmt.Sprintf("key prefix %q", f.Key))
	add(f.Stale, "lease ran out")
	if len(parts) == 0 {
		return "every record"
	}
	return strings.Join(parts, ", ")
}

type recordRow struct {
	admin.Record
	Link template.URL
}

func (h *Handler) rows(recs []admin.Record) []recordRow {
	out := make([]recordRow, len(recs))
	for i, rec := range recs {
		out[i] = recordRow{rec, h.link("/record", url.Values{"scope": {rec.Scope}, "key": {string(rec.Key)}})}
	}
	return out
}

func (h *Handler) records(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f, err := parseFilter(q.Get)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	aq := f.query()
	aq.MaxExamined = h.cfg.examine
	if f.values().Encode() == "" {
		// Every record matches: a scan step of twice the page reads little more than the page.
		aq.ScanCount = min(max(2*f.Limit, 100), consumer.DefaultScanCount)
	}
	page, err := h.in.List(r.Context(), aq)
	if err != nil {
		h.storeFailed(w, r, err)
		return
	}
	var next template.URL
	if page.Next != "" {
		v := f.values()
		v.Set("cursor", page.Next)
		if f.Limit != 100 {
			v.Set("limit", strconv.Itoa(f.Limit))
		}
		next = h.link("/records", v)
	}
	asked, _ := strconv.Atoi(q.Get("limit"))
	h.render(w, "records", http.StatusOK, view{Title: "Records", Nav: "records", D: struct {
		F        filter
		Describe string
		Rows     []recordRow
		Examined int
		Next     template.URL
		First    template.URL
		Capped   bool
		MaxPage  int
		Ops      []string
	}{f, f.describe(), h.rows(page.Records), page.Examined, next, h.link("/records", f.values()), asked > maxPage, maxPage,
		[]string{"unstick", "forget", "rerun"}}})
}

// maxResultShown is how much of a stored result the detail page shows.
const maxResultShown = 64 << 10

func (h *Handler) record(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	scope, key := q.Get("scope"), consumer.Key(q.Get("key"))
	if err := key.Validate(); err != nil {
		h.fail(w, r, http.StatusBadRequest, "key: "+err.Error())
		return
	}
	rec, err := h.in.Inspect(r.Context(), scope, key)
	if err != nil && !errors.Is(err, admin.ErrCorrupt) {
		if errors.Is(err, admin.ErrNotFound) {
			h.fail(w, r, http.StatusNotFound, err.Error())
			return
		}
		h.storeFailed(w, r, err)
		return
	}
	if rec.Scope == "" {
		rec.Scope = scope
	}
	show := q.Get("result") == "1"
	var result, resultForm string
	var cut bool
	if show && len(rec.Result) > 0 {
		b := rec.Result
		if cut = len(b) > maxResultShown; cut {
			b = b[:maxResultShown]
		}
		if utf8.Valid(b) {
			result, resultForm = string(b), "text"
		} else {
			result, resultForm = fmt.Sprintf("% x", b), "hex bytes"
		}
	}
	ops := map[string]bool{
		"unstick": rec.State == "started",
		"forget":  rec.State == "started" || rec.State == "completed" || rec.State == "failed" || rec.State == "retry",
		"rerun":   rec.State == "completed" || rec.State == "failed",
	}
	if rec.Corrupt != "" || rec.Fence <= 0 {
		ops = map[string]bool{}
	}
	h.render(w, "record", http.StatusOK, view{Title: "Record " + oneLine(string(key), 40), Nav: "records", D: struct {
		R          admin.Record
		State      string
		Show       bool
		Result     string
		ResultForm string
		Cut        bool
		ShowLink   template.URL
		HideLink   template.URL
		Ops        map[string]bool
		Max        int
	}{rec, stateLabel(rec), show, result, resultForm, cut,
		h.link("/record", url.Values{"scope": {rec.Scope}, "key": {string(key)}, "result": {"1"}}),
		h.link("/record", url.Values{"scope": {rec.Scope}, "key": {string(key)}}), ops, maxResultShown}})
}
