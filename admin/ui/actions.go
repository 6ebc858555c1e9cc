package ui

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idemkit/admin"
	"github.com/idemkit/idemkit/consumer"
)

// maxForm is the most bytes a change request's form may hold.
const maxForm = 64 << 10

var ops = map[string]consumer.OperatorOp{"unstick": consumer.OpUnstick, "forget": consumer.OpForget, "rerun": consumer.OpRerun}

// actor names who asks for a change, or refuses the request (and says so) and
// returns false.
func (h *Handler) actor(w http.ResponseWriter, r *http.Request) (string, bool) {
	if h.cfg.actor == nil {
		h.fail(w, r, http.StatusForbidden, "This UI is read-only: the service that serves it gave no actor function (ui.WithActor), so it cannot record who makes a change.")
		return "", false
	}
	who, err := h.cfg.actor(r)
	if err != nil {
		h.fail(w, r, http.StatusForbidden, "Not allowed to change records: "+err.Error())
		return "", false
	}
	if strings.TrimSpace(who) == "" {
		h.fail(w, r, http.StatusForbidden, "Not allowed to change records: the service's actor function named nobody.")
		return "", false
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if err := r.ParseForm(); err != nil {
		h.fail(w, r, http.StatusBadRequest, "The form could not be read: "+err.Error())
		return "", false
	}
	return who, true
}

// change makes one operator transition on one record, at the fence the record
// was shown with.
func (h *Handler) change(w http.ResponseWriter, r *http.Request) {
	op, ok := ops[r.PathValue("op")]
	if !ok {
		h.fail(w, r, http.StatusNotFound, "There is no such action: use unstick, forget or rerun.")
		return
	}
	who, ok := h.actor(w, r)
	if !ok {
		return
	}
	scope, key, reason := r.PostForm.Get("scope"), consumer.Key(r.PostForm.Get("key")), r.PostForm.Get("reason")
	fence, err := strconv.ParseInt(r.PostForm.Get("fence"), 10, 64)
	if err != nil || fence <= 0 {
		h.fail(w, r, http.StatusBadRequest, "The form carries no fence: open the record and use the form on its page, which carries the fence it shows.")
		return
	}
	if strings.TrimSpace(reason) == "" {
		h.fail(w, r, http.StatusBadRequest, "Give a reason: it is recorded in the record with your name.")
		return
	}
	c := admin.Change{Scope: scope, Key: key, Actor: who, Reason: reason, Fence: fence}
	var res admin.Result
	switch op {
	case consumer.OpUnstick:
		res, err = h.in.Unstick(r.Context(), c)
	case consumer.OpForget:
		res, err = h.in.Forget(r.Context(), c)
	default:
		res, err = h.in.Rerun(r.Context(), c)
	}
	back := h.link("/record", url.Values{"scope": {scope}, "key": {string(key)}})
	switch {
	case errors.Is(err, admin.ErrFenceMoved):
		h.cfg.logger.Info("ui: operator change refused", "op", op.String(), "actor", who, "scope", res.Scope, "why", "moved", "fence", fence, "now_fence", res.Fence)
		h.render(w, "error", http.StatusConflict, view{Title: "Refused", D: errData{http.StatusConflict, fmt.Sprintf("Nothing was changed: the record moved since you looked at it. You saw fence %d; it holds fence %d now (state %s). Look at it again before you act.",
			fence, res.Fence, res.Before), back}})
		return
	case errors.Is(err, admin.ErrWrongState), errors.Is(err, admin.ErrNotFound):
		why := "wrong state"
		if errors.Is(err, admin.ErrNotFound) {
			why = "not found"
		}
		h.cfg.logger.Info("ui: operator change refused", "op", op.String(), "actor", who, "scope", res.Scope, "why", why, "state", res.Before)
		h.render(w, "error", http.StatusConflict, view{Title: "Refused", D: errData{http.StatusConflict, "Nothing was changed: " + err.Error(), back}})
		return
	case err != nil:
		h.storeFailed(w, r, err)
		return
	}
	h.remember(made{Time: time.Now(), Scope: res.Scope, Text: res.Note, Keys: []consumer.Key{key}})
	h.cfg.logger.Info("ui: operator change", "op", op.String(), "actor", who, "scope", res.Scope, "fence", res.Fence, "new_fence", res.NewFence)
	h.render(w, "done", http.StatusOK, view{Title: "Done", Nav: "records", D: doneData{Res: &res, Back: back}})
}

// digest names the records a plan would change, with the state and fence of
// each: a bulk action is executed only on exactly the records it was shown.
func digest(ts []admin.Target) string {
	lines := make([]string, len(ts))
	for i, t := range ts {
		lines[i] = fmt.Sprintf("%q %s %d", string(t.Key), t.State, t.Fence)
	}
	slices.Sort(lines)
	sum := sha256.Sum256([]byte(strings.Join(lines, "\n")))
	return hex.EncodeToString(sum[:])
}

// bulkForm reads a bulk action's operation, filter and reason.
func (h *Handler) bulkForm(w http.ResponseWriter, r *http.Request) (admin.Bulk, filter, bool) {
	who, ok := h.actor(w, r)
	if !ok {
		return admin.Bulk{}, filter{}, false
	}
	op, ok := ops[r.PostForm.Get("op")]
	if !ok {
		h.fail(w, r, http.StatusBadRequest, "Pick an action: unstick, forget or rerun.")
		return admin.Bulk{}, filter{}, false
	}
	f, err := parseFilter(r.PostForm.Get)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err.Error())
		return admin.Bulk{}, filter{}, false
	}
	reason := r.PostForm.Get("reason")
	if strings.TrimSpace(reason) == "" {
		h.fail(w, r, http.StatusBadRequest, "Give a reason: it is recorded in every record the action changes, with your name.")
		return admin.Bulk{}, filter{}, false
	}
	return admin.Bulk{Op: op, Filter: f.bulkFilter(), Actor: who, Reason: reason, Max: h.cfg.bulkMax}, f, true
}

type previewData struct {
	Plan     admin.Plan
	F        filter
	Describe string
	Op       string
	Reason   string
	Digest   string
	Rows     []recordRow
	More     int
	TooMany  bool
	Values   url.Values
	Back     template.URL
	Refused  string // why an execution was refused
}

// doneData is what a change did: one record's Result, or a bulk action's Report.
type doneData struct {
	Res  *admin.Result
	Rep  *admin.Report
	Err  string // why a bulk action stopped early
	Back template.URL
}

func (h *Handler) preview(ctx context.Context, b admin.Bulk, f filter) (previewData, error) {
	plan, err := h.in.Preview(ctx, b)
	if err != nil {
		return previewData{}, err
	}
	return previewData{Plan: plan, F: f, Describe: f.describe(), Op: b.Op.String(), Reason: b.Reason, Digest: digest(plan.Targets()),
		Rows: h.rows(plan.Sample), More: plan.Count - len(plan.Sample), TooMany: plan.Count > plan.Bulk.Max, Values: f.values(),
		Back: h.link("/records", f.values())}, nil
}

// bulkPreview counts the records a bulk action would change, changing nothing,
// and asks for the count to be typed to confirm.
func (h *Handler) bulkPreview(w http.ResponseWriter, r *http.Request) {
	b, f, ok := h.bulkForm(w, r)
	if !ok {
		return
	}
	d, err := h.preview(r.Context(), b, f)
	if err != nil {
		h.storeFailed(w, r, err)
		return
	}
	h.render(w, "preview", http.StatusOK, view{Title: "Confirm " + d.Op, Nav: "records", D: d})
}

// bulkExecute previews the action again and executes it only when the operator
// typed the count they were shown and the records are the ones they were shown,
// each at the fence shown.
func (h *Handler) bulkExecute(w http.ResponseWriter, r *http.Request) {
	b, f, ok := h.bulkForm(w, r)
	if !ok {
		return
	}
	shown, err1 := strconv.Atoi(r.PostForm.Get("count"))
	typed, err2 := strconv.Atoi(strings.TrimSpace(r.PostForm.Get("confirm")))
	if err1 != nil {
		h.fail(w, r, http.StatusBadRequest, "The form carries no count: preview the action first.")
		return
	}
	if err2 != nil || typed != shown {
		h.fail(w, r, http.StatusBadRequest, fmt.Sprintf("Nothing was changed: type the count you were shown, %d, to confirm.", shown))
		return
	}
	d, err := h.preview(r.Context(), b, f)
	if err != nil {
		h.storeFailed(w, r, err)
		return
	}
	refuse := func(msg string) {
		h.cfg.logger.Info("ui: operator bulk change refused", "op", b.Op.String(), "actor", b.Actor, "scope", d.Plan.Scope, "shown", shown, "count", d.Plan.Count)
		d.Back = h.link("/records", f.values())
		d.Refused = msg
		h.render(w, "preview", http.StatusConflict, view{Title: "Refused", Nav: "records", D: d})
	}
	switch {
	case d.Plan.Count != shown:
		refuse(fmt.Sprintf("Nothing was changed: you confirmed %d records, and %d match now. The records changed since the preview: check the new count below.", shown, d.Plan.Count))
		return
	case d.TooMany:
		refuse(fmt.Sprintf("Nothing was changed: %d records match, more than the %d one action may change. Narrow the filter.", d.Plan.Count, d.Plan.Bulk.Max))
		return
	case d.Digest != r.PostForm.Get("digest"):
		refuse("Nothing was changed: the same number of records match, but not the same records at the same fences you were shown (some moved on since the preview). Check them below and confirm again.")
		return
	}
	rep, err := h.in.Execute(r.Context(), d.Plan)
	h.remember(made{Time: time.Now(), Scope: d.Plan.Scope, Text: noteText(b.Op, b.Actor, b.Reason), Keys: applied(d.Plan, rep)})
	h.cfg.logger.Info("ui: operator bulk change", "op", b.Op.String(), "actor", b.Actor, "scope", d.Plan.Scope, "planned", rep.Planned,
		"applied", rep.Applied, "moved", rep.Moved)
	if err != nil && rep.Planned == 0 {
		h.storeFailed(w, r, err)
		return
	}
	var errText string
	if err != nil {
		errText = err.Error()
	}
	h.render(w, "done", http.StatusOK, view{Title: "Done", Nav: "records", D: doneData{Back: h.link("/records", f.values()), Rep: &rep, Err: errText}})
}
