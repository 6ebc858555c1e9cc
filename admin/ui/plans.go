package ui

import (
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"

	"github.com/idemkit/idemkit/replay"
)

// maxPlanFile is the largest plan file the Replay plans page reads.
const maxPlanFile = 4 << 20

// maxPlans is how many plan files the Replay plans page lists.
const maxPlans = 200

type planFile struct {
	Name string
	Size int64
	Link template.URL
}

func (h *Handler) plans(w http.ResponseWriter, r *http.Request) {
	var files []planFile
	more := 0
	if h.cfg.plans != nil {
		entries, err := fs.ReadDir(h.cfg.plans, ".")
		if err != nil {
			h.fail(w, r, http.StatusInternalServerError, "The plan directory could not be read: "+err.Error())
			return
		}
		for _, e := range entries {
			if e.IsDir() || !strings.HasSuffix(e.Name(), ".json") {
				continue
			}
			if len(files) == maxPlans {
				more++
				continue
			}
			info, err := e.Info()
			if err != nil {
				continue
			}
			files = append(files, planFile{e.Name(), info.Size(), h.link("/plan", url.Values{"name": {e.Name()}})})
		}
	}
	slices.SortFunc(files, func(a, b planFile) int { return strings.Compare(a.Name, b.Name) })
	h.render(w, "plans", http.StatusOK, view{Title: "Replay plans", Nav: "plans", D: struct {
		Configured bool
		Files      []planFile
		More       int
	}{h.cfg.plans != nil, files, more}})
}

type verdictRow struct {
	Verdict  replay.Verdict
	Count    int
	Examples []string
}

func (h *Handler) plan(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("name")
	if h.cfg.plans == nil {
		h.fail(w, r, http.StatusNotFound, "No plan directory was given (ui.WithPlans, or idemkit ui --plans DIR).")
		return
	}
	if !fs.ValidPath(name) || strings.Contains(name, "/") || path.Ext(name) != ".json" {
		h.fail(w, r, http.StatusBadRequest, fmt.Sprintf("Plan %q: pick a .json file the Replay plans page lists.", name))
		return
	}
	f, err := h.cfg.plans.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		h.fail(w, r, http.StatusNotFound, fmt.Sprintf("There is no plan %q in the plan directory.", name))
		return
	}
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "The plan could not be read: "+err.Error())
		return
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxPlanFile+1))
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "The plan could not be read: "+err.Error())
		return
	}
	if len(b) > maxPlanFile {
		h.fail(w, r, http.StatusBadRequest, fmt.Sprintf("Plan %q is over %d bytes: it is not one idemkit plan --out wrote.", name, maxPlanFile))
		return
	}
	var p replay.PlanReport
	if err := json.Unmarshal(b, &p); err != nil || p.Counts == nil {
		h.fail(w, r, http.StatusBadRequest, fmt.Sprintf("Plan %q is not a plan idemkit plan --out wrote: %v", name, err))
		return
	}
	var rows []verdictRow
	for _, v := range replay.Verdicts {
		if v == replay.Error {
			continue
		}
		ex := p.Examples[v]
		if len(ex) > 5 {
			ex = ex[:5]
		}
		rows = append(rows, verdictRow{v, p.Counts[v], ex})
	}
	invalid := p.Invalid
	if len(invalid) > 20 {
		invalid = invalid[:20]
	}
	h.render(w, "plan", http.StatusOK, view{Title: "Plan " + name, Nav: "plans", D: struct {
		Name    string
		P       replay.PlanReport
		Rows    []verdictRow
		Invalid []replay.ItemError
	}{name, p, rows, invalid}})
}
