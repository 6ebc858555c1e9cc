package idemkittest

import (
	"errors"
	"fmt"

	"github.com/idemkit/idemkit/consumer"
)

// judge fills v's Failure (or, after the retention, its Warning) from what the
// trial saw: a problem it found on the way, an effect count other than one, or
// a last delivery that is not a DUPLICATE of the stored result.
func (t *trial[T]) judge(v *Verdict) {
	if v.Skipped != "" || t.err != nil {
		return
	}
	a := abouts[t.scenario]
	details := fmt.Sprintf("handler ran %s; deliveries: %s", times(v.Runs), trace(v.Deliveries))
	var msg string
	switch {
	case t.scenario == AfterRetention && t.problem == "" && v.Effects != 0 &&
		(v.Effects != 1 || t.final.Outcome != consumer.Duplicate || t.final.Err != nil):
		msg = fmt.Sprintf("%s: effect ran %s, and the last delivery ended %v%s: %s; %s [%s]", a.name, times(v.Effects),
			t.final.Outcome, errText(t.final.Err), t.why(), t.fix(), details)
	case t.problem != "":
		msg = fmt.Sprintf("%s: %s [%s]", a.name, t.problem, details)
	case v.Effects == 0:
		why := "the effect never showed in the count of WithEffects: the handler did not make it, or the count does not see it"
		if len(t.herrs) > 0 {
			why += fmt.Sprintf("; the handler returned: %v", t.herrs[0])
		}
		msg = fmt.Sprintf("%s: effect ran 0 times, want 1: %s; give the kit a message the handler completes, and a "+
			"WithEffects that counts what it does [%s]", a.name, why, details)
	case v.Effects != 1:
		msg = fmt.Sprintf("%s: effect ran %s, want 1: %s; %s [%s]", a.name, times(v.Effects), t.why(), t.fix(), details)
	case t.final.Outcome != consumer.Duplicate || t.final.Err != nil:
		msg = fmt.Sprintf("%s: the last delivery ended %v%s, want a DUPLICATE of the stored result: the key should have "+
			"been completed by then%s [%s]", a.name, t.final.Outcome, errText(t.final.Err), t.handlerFailed(), details)
	}
	if t.scenario == AfterRetention {
		v.Warning = msg
	} else {
		v.Failure = msg
	}
}

// why says why the handler's effect ran more than once in this scenario.
func (t *trial[T]) why() string {
	a := abouts[t.scenario]
	switch t.scenario {
	case CrashAfterEffect, StoreDownAtCompletion:
		return fmt.Sprintf(a.why, t.s.Lease)
	case LeaseLost:
		return fmt.Sprintf(a.why, t.fences[0], t.fences[1])
	case AfterRetention:
		return fmt.Sprintf(a.why, t.s.Retention)
	case StoreDownAtClaim:
		if t.s.FailOpen {
			return a.why + ", and WithFailOpen ran the handler unguarded: no record kept its completion, so the next " +
				"delivery ran it again"
		}
		return a.why + ", and the redelivery should have run the handler once"
	}
	return a.why
}

func (t *trial[T]) fix() string { return abouts[t.scenario].fix }

// handlerFailed names the handler's own error, when it returned one.
func (t *trial[T]) handlerFailed() string {
	if len(t.herrs) == 0 {
		return ""
	}
	return fmt.Sprintf("; the handler returned: %v (the kit needs a message the handler completes)", t.herrs[0])
}

func errText(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, consumer.ErrPermanent), errors.Is(err, consumer.ErrAttemptsExhausted):
		return fmt.Sprintf(" (the key failed for good: %v)", err)
	}
	return fmt.Sprintf(" (%v)", err)
}

// times is n times, in words: "1 time", "2 times".
func times(n int) string {
	if n == 1 {
		return "1 time"
	}
	return fmt.Sprintf("%d times", n)
}
