// Package idemkittest proves a handler idempotent: it runs the handler through
// idemkit's engine in each of the ways a message's deliveries go wrong
// (duplicates, concurrent workers, crashes at every point, a lost lease, an
// unreachable store, a lost reply, a record past its retention) and fails the
// test naming the scenario, the effect count it saw, why that happens and the
// fix.
//
//	func TestChargeIsIdempotent(t *testing.T) {
//		kit := idemkittest.New[Receipt](t,
//			idemkittest.WithEffects(func() int { return countCharges(t, db) }),
//			idemkittest.WithReset(func() { deleteCharges(t, db) }))
//		msg := idemkittest.Message{Key: "charge:order-42", Payload: body}
//		kit.RequireExactlyOnce(ctx, msg, func(ctx context.Context) (Receipt, error) {
//			return charge(ctx, db, body) // the handler you give ExecuteIdempotently or an adapter
//		})
//	}
//
// The handler is the function given to consumer.ExecuteIdempotently (an
// adapter's handler, with its message bound). WithEffects is the test's own
// count of the side effect (rows, calls to a fake gateway); every scenario
// requires it to rise by exactly one. RequireExactlyOnce runs every scenario;
// Run runs those named (kit.Run(ctx, msg, handler, idemkittest.CrashAfterEffect));
// Check runs them and returns the Report without failing the test, for tests
// that expect a scenario to fail.
//
// # The scenarios
//
// Each scenario starts from no record: a store of its own (a scope of its own
// on a shared server), WithReset run first. It delivers the message through
// consumer.ExecuteIdempotently, the entry point of the one engine every adapter
// runs on (claim, lease keeper, settlement, release), with faults injected
// under it by a FaultStore. It redelivers, as a broker would, until a delivery
// settles (acked or dead-lettered), then delivers once more, and requires that
// last delivery to be a DUPLICATE of the stored result and the effect count to
// have risen by one.
//
//   - DuplicateAfterCompletion: the message again after it completed.
//   - ConcurrentDeliveries: eight deliveries at once; the claim holder waits
//     until all eight have sent their claims.
//   - CrashBeforeHandler: the worker dies between its claim and its handler.
//   - CrashAfterEffect: the worker dies after the handler returned, before its
//     completion reached the store. The redelivery, once the lease has run
//     out, takes the key over and runs the handler again.
//   - CrashAfterCompletion: the worker dies as its completion is applied,
//     before the ack.
//   - LeaseLost: the first owner's renewals fail while its handler runs;
//     idemkit cancels its context (cause: *consumer.LeaseLostError) before its
//     lease can run out; the lease runs out on the store, a second owner takes
//     the key over (the fence rises) and completes it; then the first handler's
//     code runs, on its cancelled context, and its completion must be refused.
//   - StoreDownAtClaim: the claim meets a store that cannot be reached; the
//     redelivery finds it back. Under consumer.WithFailOpen the handler ran
//     unguarded, and the next delivery runs it again.
//   - StoreDownAtCompletion: every call of the attempt fails from the moment
//     its handler returns until idemkit gives up on its completion (the lease,
//     which idemkit cannot renew either, is about to run out); the store comes
//     back and the redelivery takes the key over.
//   - CompletionReplyLost: the completion is applied and its reply lost;
//     idemkit sends it again, and the store must answer as the first time.
//   - AfterRetention: the message again after the store's retention removed
//     its record. A second effect here is a warning (logged, Verdict.Warning),
//     not a failure: it is what the retention means.
//
// What handlers get: a plain handler (its effect and its completion are two
// writes) passes every scenario but CrashAfterEffect and
// StoreDownAtCompletion, where its effect runs twice: that is idemkit's
// at-least-once bound for plain completion, and only a transactional effect
// closes it: postgres.InTx or InSQLTx (the effect and the completion commit
// together), dynamodb.Apply for a one-item effect, or an effect that running
// again does not repeat (a write of a row the key owns, guarded with the
// fence: package fence). LeaseLost fails a handler that ignores its cancelled
// context and writes without the fence. AfterRetention warns about every
// handler whose completion lives only in the store's record; postgres.InTx
// keeps its own (postgres.WithCompletionRetention). A fenced row keyed by the
// key is written again after the retention with fence 1 and refused as stale:
// the warning says so.
//
// # What a crash is, in one process
//
// A worker's crash is simulated at the store, where it shows: from the crash
// on, none of the attempt's calls (its renewals, its completion or failure, its
// release) reaches the store, so its record stays exactly as the crash left
// it: started, owned by a dead owner, with a lease that only time ends. The
// library in the test process sees those calls refused as lease lost, and the
// kit throws the dead delivery's result away. The crash points are where the
// kit's wrapper around the handler stands: before it calls the handler
// (CrashBeforeHandler), after the handler returned (CrashAfterEffect), and the
// store call that records the completion, applied with its reply lost
// (CrashAfterCompletion). The redelivery then comes as after a real crash: once
// the lease has run out on the store's clock, another owner takes the key over
// (TAKEN_OVER, fence + 1) and runs the handler. What is not simulated: a crash
// inside the handler's own code (between two of its writes), which only the
// handler's transaction can make harmless, and the broker's side (acks,
// offsets): the adapters' own tests cover those.
//
// # Clocks
//
// By default each scenario runs on a memory store (store/memory) whose clock
// is a Clock the kit moves: a lease runs out or a record expires when the kit
// advances it, at no cost in wall time. idemkit's engine keeps its own
// deadlines on the real clock, as in production, so LeaseLost and
// StoreDownAtCompletion wait for the engine to give the attempt up, just under
// DefaultLease (1s) each; a whole run takes about two seconds. With WithStore
// the scenarios run on any consumer.Store (Redis, PostgreSQL, DynamoDB): the
// kit then waits for leases on the store's own clock (give it a short lease)
// and skips AfterRetention when the retention is long.
//
// # Faults on their own
//
// FaultStore wraps any consumer.Store and fails, delays, or applies and loses
// the reply of the Nth call of a store method (for a key, for one attempt),
// and crashes attempts, for tests of things the scenarios do not cover.
package idemkittest
