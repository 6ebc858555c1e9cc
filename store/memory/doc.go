// Package memory keeps idempotency records in this process's memory, with the
// semantics of the other stores (it passes the conformance suite of package
// consumertest, and a randomized differential test compares it with the Redis
// store answer by answer). It needs no server: use it in unit tests, demos and
// single-process tools. It guards nothing across processes, and its records end
// with the process.
//
//	store, err := memory.NewStore(consumer.WithScope("payments"))
//
// Its clock is the local clock unless WithClock gives another: with a fake
// clock, a test makes a lease run out or a record expire by moving the clock,
// at no cost in wall time (package idemkittest runs its scenarios that way).
package memory
