package idemkittest

import (
	"fmt"
	"strings"

	"github.com/idemkit/idemkit/consumer"
)

// Report is what a run of scenarios found, one Verdict per scenario in the
// order they ran.
type Report struct {
	Verdicts []Verdict
	// Err says why the kit could not run (a missing option, a bad message, a
	// store it could not make, a cancelled context): the scenarios after it did
	// not run.
	Err error
}

// Failed reports whether a scenario failed or the kit could not run.
// Warnings and skipped scenarios are not failures.
func (r Report) Failed() bool {
	if r.Err != nil {
		return true
	}
	for _, v := range r.Verdicts {
		if v.Failure != "" {
			return true
		}
	}
	return false
}

// Verdict returns the verdict of scenario s, if it ran.
func (r Report) Verdict(s Scenario) (Verdict, bool) {
	for _, v := range r.Verdicts {
		if v.Scenario == s {
			return v, true
		}
	}
	return Verdict{}, false
}

// String is one line per verdict (see Verdict.String), then the kit's error if
// it could not run.
func (r Report) String() string {
	var b strings.Builder
	for _, v := range r.Verdicts {
		b.WriteString(v.String())
		b.WriteByte('\n')
	}
	if r.Err != nil {
		fmt.Fprintf(&b, "idemkittest: %v\n", r.Err)
	}
	return b.String()
}

// Verdict is what one scenario found.
type Verdict struct {
	Scenario Scenario
	// Effects is how much the count of WithEffects rose over the scenario.
	Effects int
	// Runs is how many times the handler was called.
	Runs int
	// Deliveries are the scenario's deliveries, in the order they started.
	Deliveries []Delivery
	// Failure says what went wrong, why, and the fix; "" when the scenario passed.
	Failure string
	// Warning is a finding that fails no test (the redelivery after the
	// retention ran the handler again); "".
	Warning string
	// Skipped says why the scenario did not run; "".
	Skipped string
}

// Passed reports whether the scenario ran and did not fail.
func (v Verdict) Passed() bool { return v.Failure == "" && v.Skipped == "" }

// String is the verdict in one line: "pass", "FAIL", "warn" or "skip", the
// scenario, and the effect count when it is not one.
func (v Verdict) String() string {
	status := "pass"
	switch {
	case v.Skipped != "":
		return "skip  " + v.Scenario.String() + ": " + v.Skipped
	case v.Failure != "":
		status = "FAIL"
	case v.Warning != "":
		status = "warn"
	}
	line := status + "  " + v.Scenario.String()
	if v.Effects != 1 {
		line += ": effect ran " + times(v.Effects)
	}
	return line
}

// Delivery is one delivery of a scenario.
type Delivery struct {
	Outcome consumer.Outcome
	Err     error // the outcome's error (Result.Err)
	Fence   int64 // the fence of the attempt that ran, or of the record (Result.Fence)
	// Note says what the scenario did to it ("crashed after the handler"); "" for
	// an ordinary delivery.
	Note string
}

// String is the delivery in a few words: "SUCCESS fence 2 (redelivered after the lease)".
func (d Delivery) String() string {
	s := d.Outcome.String()
	if d.Fence != 0 {
		s += fmt.Sprintf(" fence %d", d.Fence)
	}
	if d.Note != "" {
		s += " (" + d.Note + ")"
	}
	return s
}

// trace is the deliveries in one line, for failure messages.
func trace(ds []Delivery) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = fmt.Sprintf("%d %v", i+1, d)
	}
	return strings.Join(parts, ", ")
}
