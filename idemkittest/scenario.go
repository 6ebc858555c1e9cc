package idemkittest

import "fmt"

// Scenario is one way a message's deliveries can go wrong. Each runs the
// handler through idemkit's engine (consumer.ExecuteIdempotently) on a fresh
// record, with the faults it names, redelivers as a broker would until a
// delivery settles, delivers once more at the end, and then requires the
// effect count to have risen by exactly one and that last delivery to be a
// DUPLICATE of the stored result.
type Scenario int

// The scenarios, in the order RequireExactlyOnce runs them. The package
// documentation says what each simulates and which handlers pass it.
const (
	// DuplicateAfterCompletion: the message comes again after its first delivery
	// completed.
	DuplicateAfterCompletion Scenario = iota + 1
	// ConcurrentDeliveries: eight workers get the message at once; the one that
	// claims it holds its handler until every other delivery has sent its claim.
	ConcurrentDeliveries
	// CrashBeforeHandler: the worker dies after its claim and before the handler
	// starts; the message is redelivered once the lease has run out.
	CrashBeforeHandler
	// CrashAfterEffect: the worker dies after the handler returned (its effect
	// done) and before its completion reached the store; the message is
	// redelivered once the lease has run out.
	CrashAfterEffect
	// CrashAfterCompletion: the worker dies as its completion reaches the store,
	// before the broker's ack; the message is redelivered.
	CrashAfterCompletion
	// LeaseLost: the first owner's renewals fail while its handler runs, its
	// context is cancelled when its lease is about to run out, a second owner
	// takes the key over (the fence rises) and completes it, and then the first
	// handler runs on; its completion must be refused.
	LeaseLost
	// StoreDownAtClaim: the store cannot be reached when the message comes; it is
	// back for the redelivery.
	StoreDownAtClaim
	// StoreDownAtCompletion: the store goes down as the handler finishes and stays
	// down until the attempt's lease has run out; once it is back, the message is
	// redelivered.
	StoreDownAtCompletion
	// CompletionReplyLost: the completion is applied by the store and its reply
	// lost; idemkit sends it again.
	CompletionReplyLost
	// AfterRetention: the message comes again after the store's retention has
	// removed its record. The handler runs again unless its completion was kept
	// elsewhere; that is reported as a warning, not a failure: the retention is
	// a setting, not a bug in the handler.
	AfterRetention

	lastScenario = AfterRetention
)

// Scenarios returns every scenario, in the order RequireExactlyOnce runs them.
func Scenarios() []Scenario {
	out := make([]Scenario, 0, lastScenario)
	for s := DuplicateAfterCompletion; s <= lastScenario; s++ {
		out = append(out, s)
	}
	return out
}

// about is what the kit says about a scenario: its name, what it simulated,
// why a count other than one happens there, and the fix.
type about struct {
	name string // as failure messages name it
	slug string // in the scope of its records
	why  string // why the handler ran its effect again (a format with the store's figures)
	fix  string
}

var abouts = [...]about{
	DuplicateAfterCompletion: {
		name: "duplicate after completion", slug: "duplicate",
		why: "the message came again after its first delivery completed, and its record should have answered DUPLICATE " +
			"without running the handler",
		fix: "check that the store keeps its records (Peek the key after the first delivery) and that the handler's " +
			"effect is counted once per run",
	},
	ConcurrentDeliveries: {
		name: "8 concurrent deliveries", slug: "concurrent",
		why: "eight workers got the message at once: one claimed it, and the others should have been told " +
			"IN_PROGRESS without running the handler",
		fix: "a store must let one owner at a time hold a key: run its conformance suite (package consumertest)",
	},
	CrashBeforeHandler: {
		name: "crash before the handler", slug: "crash-before",
		why: "the worker died after its claim and before its handler started; once the lease ran out, the " +
			"redelivery took the key over and ran the handler",
		fix: "the effect should have run exactly once, on the redelivery: check what WithEffects counts",
	},
	CrashAfterEffect: {
		name: "crash after effect, before completion", slug: "crash-after-effect",
		why: "the worker died after the handler's effect and before its completion reached the store; once the " +
			"lease (%v) ran out, the redelivery took the key over and ran the handler again",
		fix: "make the effect transactional with its completion (postgres.InTx or InSQLTx; dynamodb.Apply for a " +
			"one-item effect), or make it a write of a row the key owns, guarded with the fence " +
			"(consumer.FenceFromContext, package fence), so that running it again changes nothing",
	},
	CrashAfterCompletion: {
		name: "crash after completion, before the ack", slug: "crash-after-completion",
		why: "the worker died as its completion reached the store, before the broker's ack; the redelivery " +
			"should have found the key completed",
		fix: "the store must apply a completion before it answers: run its conformance suite (package consumertest)",
	},
	LeaseLost: {
		name: "lease lost mid-handler, second owner runs", slug: "lease-lost",
		why: "the first owner's renewals failed while its handler ran: its context was cancelled (cause: a " +
			"*consumer.LeaseLostError), a second owner took the key over (fence %d, then %d) and completed it, and " +
			"the first handler then went on and applied its effect anyway",
		fix: "return as soon as ctx is done (pass ctx to every call that makes the effect), and guard the write with " +
			"the fence (consumer.FenceFromContext, package fence) or make it transactional (postgres.InTx): a check " +
			"of ctx alone leaves a window between the check and the write",
	},
	StoreDownAtClaim: {
		name: "store down at the claim", slug: "down-at-claim",
		why: "the store could not be reached when the message came",
		fix: "leave the store failing closed (the default), or make the effect idempotent on its own " +
			"(postgres.InTx records the completion with it)",
	},
	StoreDownAtCompletion: {
		name: "store down at the completion", slug: "down-at-completion",
		why: "the store went down as the handler finished, so its completion could not be recorded before the " +
			"lease (%v) ran out; once the store was back, the redelivery took the key over and ran the handler again",
		fix: "make the effect transactional with its completion (postgres.InTx or InSQLTx; dynamodb.Apply for a " +
			"one-item effect), or make it a write of a row the key owns, guarded with the fence " +
			"(consumer.FenceFromContext, package fence), so that running it again changes nothing",
	},
	CompletionReplyLost: {
		name: "completion applied, reply lost", slug: "reply-lost",
		why: "the completion reached the store and its reply was lost; idemkit sent it again, and the store " +
			"should have answered as it did the first time",
		fix: "a store must answer a call repeated after a lost reply as it answered the first (see consumer.Store): " +
			"run its conformance suite (package consumertest)",
	},
	AfterRetention: {
		name: "redelivery after the retention", slug: "after-retention",
		why: "the store keeps a record for its retention (%v) only: a delivery after that is new to it, and runs " +
			"the handler again",
		fix: "keep the retention (consumer.WithRetention) longer than a message can come again (broker retention, " +
			"replays), or record the completion with the effect (postgres.InTx keeps its completion row for " +
			"postgres.WithCompletionRetention, 7 days by default)",
	},
}

func (s Scenario) valid() bool { return s >= DuplicateAfterCompletion && s <= lastScenario }

// String is the scenario's name, as failure messages give it.
func (s Scenario) String() string {
	if !s.valid() {
		return fmt.Sprintf("scenario(%d)", int(s))
	}
	return abouts[s].name
}
