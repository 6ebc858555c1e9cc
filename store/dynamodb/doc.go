// Package dynamodb keeps idempotency records in an Amazon DynamoDB table (a
// consumer.Store on the AWS SDK for Go v2), for services on AWS that run no
// Redis, and makes a handler whose effect is one DynamoDB item run that effect
// exactly once per key, crashes included (Apply).
//
//	cfg, err := config.LoadDefaultConfig(ctx) // github.com/aws/aws-sdk-go-v2/config
//	client := awsdynamodb.NewFromConfig(cfg)  // github.com/aws/aws-sdk-go-v2/service/dynamodb
//	if err := dynamodb.CreateTable(ctx, client, dynamodb.TableSpec{}); err != nil { ... } // once, or from the deployment
//	store, err := dynamodb.New(client, dynamodb.Config{}, consumer.WithScope("payments"))
//	r := consumer.ExecuteIdempotently(ctx, store, key, payload, handler)
//
// # The store
//
// Store has the semantics of every consumer.Store (it passes the conformance
// suite in package consumertest): fence +1 on every claim and takeover, attempts
// counted from the start of their handler (consumer.Claim.Start: a claim whose
// owner died before its handler started is taken over without a charge), the
// payload fingerprint checked before the state (a record keeps the first
// fingerprint a claim brings), releases not counted as attempts, claims made
// under the key's lock taken over by the next lock holder and claims made
// without it never before their lease runs out, calls sent again after a lost
// reply answering as the first did (a settlement or release is known by its
// fence). Settled records keep no owner; failed attempts leave a history of the
// last four errors (the newest capped at 8 KiB, older ones at 256 bytes) that a
// completion drops.
//
// Every transition is one conditional write on one item: a condition on the
// record's state, owner, fence and lease decides whether it applies, never Go
// code that read first and writes blindly after. A key's first claim is one
// PutItem of the whole record (condition: no item); a claim that finds a record
// reads it (a strongly consistent read, or the item DynamoDB sends back with
// the refusal) and writes the transition that record allows, conditioned on the
// record still being what was read; when another worker's transition came in
// between, it reads again (at most 8 rounds, each one another worker's
// progress). A completion whose claim the caller knows (as idemkit's executions
// do) is one PutItem of the completed record, conditioned on the caller's
// owner token; failures, renewals and releases are one UpdateItem each. A
// message handled from a new key thus costs two writes (claim and completion,
// about 1 WCU each for small results), a duplicate one refused write and one
// read. A batch (ExecuteBatch, the adapters' pipelines) is sent as parallel
// conditional writes, Config.Concurrency at most in flight (default 16),
// since DynamoDB has no conditional write of many items outside transactions;
// items of one key go one after another, in input order. Every call is bounded
// by its context and by consumer.WithCallTimeout.
//
// The table has the partition key "pk" (a string: the prefix, the scope in
// braces, the key) and the TTL attribute "expires"; the other attributes are
// listed in item.go of this package.
//
// # Limits and bad input
//
// A store has one result limit, Settings().MaxResultSize: MaxResult (397 KiB:
// an item holds 400 KB, less the longest partition key and the record's other
// attributes), or the lower limit consumer.WithMaxResultSize gives. idemkit
// decides with it before the completion is written, so a larger result is
// recorded as dropped, SUCCESS says so (ResultDropped), and duplicates get a
// consumer.ResultTooLargeError that names this limit. New refuses a
// WithMaxResultSize above MaxResult, naming both, rather than keep less than
// asked: the option's own default (1 MiB) becomes MaxResult. New likewise
// refuses a prefix and scope that leave a key of consumer.MaxKeyLen bytes no
// room in DynamoDB's 2048-byte partition key, and a nil client, typed or not.
//
// New makes no call to DynamoDB. Check (for start-up and readiness probes)
// reads one item to learn that the table is there and takes the record key. A
// call on a missing table answers a store outage (consumer.ErrStoreUnavailable
// and ErrNoTable) that names the table and CreateTable: nothing was claimed or
// run, no attempt is counted, and adapters retry the message as for any outage
// until the table is made. (Under consumer.WithFailOpen, handlers then run
// unguarded, as for any outage: call Check before serving.)
//
// An item at a record's key that is not a record (an attribute of the layout
// with another type, an unknown state, a state without the attributes it
// needs) is a corrupt record (consumer.CorruptRecordError): no handler runs,
// adapters dead-letter the message, and the item is left as it is for an
// operator to look at. Attributes outside the layout are left alone.
//
// # Retention
//
// A record expires at "expires" (unix seconds): a claim or renewal sets it to
// the lease end plus the retention, a settlement to the settlement plus the
// retention. With TTL enabled on the table (CreateTable does it) DynamoDB
// deletes expired items, typically within a few days. Until then every read
// treats an expired item as absent: Peek does not find it, and a claim starts
// the key afresh (attempt 1, a new fingerprint) with its fence raised by one
// above the old record's, so that writes fenced by the old attempts still
// refuse a stale owner.
//
// # Capacity errors
//
// A request DynamoDB refuses for lack of capacity (ProvisionedThroughputExceeded,
// RequestLimitExceeded, ThrottlingException) is retried by the client with the
// SDK's backoff (its Retryer; the standard one tries 3 times), within the call
// timeout. When the retries give up, the call answers a store outage
// (consumer.ErrStoreUnavailable, *consumer.StoreError; Throttled reports the
// cause): nothing runs, and adapters retry the message as for any outage. The
// SDK's default backoff grows to seconds under throttling, so with the default
// 5s call timeout a throttled call often ends at the timeout; a Retryer with a
// smaller MaxBackoff (retry.NewStandard, MaxBackoff of 100ms to 1s) retries more
// often within it.
//
// # Leases and clocks
//
// DynamoDB offers no server clock in its conditions, so a lease is a deadline
// on the clock of the worker that claimed or renewed it (unix ms in the
// record), and a worker takes a started record over only once its own clock is
// past that deadline plus Config.ClockSkew (default 1s). IN_PROGRESS reports
// how long until then. The running attempt keeps idemkit's local deadline on its
// own monotonic clock (its handler is cancelled before the lease could run out,
// see consumer.LeaseMargin).
//
// The bound: no two attempts of a key run at once as long as the clocks of any
// two workers sharing the table differ by less than ClockSkew. A worker whose
// clock runs behind the others by more reads their leases as live for longer:
// it takes over a dead worker's claim late, a delay only. A worker whose clock
// runs ahead of a claim's owner by more than the allowance (or an owner whose
// clock runs behind, which writes deadlines that end early in the others'
// time) may take a claim over while its owner still runs, so two handlers of
// the key run at once. The fence is the guard that covers that case: the
// takeover raised it, so the first owner's renewal and completion are refused
// (consumer.ErrLeaseLost, its handler cancelled at its next renewal, nothing
// recorded), a resource written with the attempt's fence
// (consumer.FenceFromContext) refuses its writes, and an effect written with
// Apply happens once whatever the clocks say. Keep the fleet on NTP or Amazon
// Time Sync (which keeps EC2 clocks within a millisecond or so) and ClockSkew
// well above the worst offset; set NoClockSkew only for workers that share one
// clock.
//
// # Exactly once for an effect on one item
//
// Plain completion leaves a window: a worker that dies after its handler's
// write and before the completion reached the table has the handler run again
// by the next delivery (at most once per crash). Without multi-item
// transactions the completion cannot be written in the same request as the
// effect, but an effect that is one DynamoDB item can carry the key's mark
// instead: Apply (an UpdateItem) and ApplyPut (a PutItem) add the key's mark
// (16 bytes of SHA-256 of the scope and key) to a list in the item in the same
// conditional write as the effect, refused when the mark is there already. The
// handler run again after the crash gets consumer.ErrAlreadyApplied from Apply
// with the item as it is; it returns that error (consumer.AlreadyApplied) with
// the result it derives from the item, and idemkit records the key as done and
// reports DUPLICATE. One effect, whatever crashed when, and whatever the
// clocks: two owners of a key racing through Apply apply it once.
//
//	func(ctx context.Context) (int64, error) {
//		out, err := dynamodb.Apply(ctx, client, &awsdynamodb.UpdateItemInput{
//			TableName: aws.String("accounts"), Key: accountKey,
//			UpdateExpression: aws.String("ADD balance :amount"), ReturnValues: types.ReturnValueAllNew, ...})
//		if out == nil {
//			return 0, err
//		}
//		return balanceOf(out.Attributes), err // nil, or consumer.ErrAlreadyApplied
//	}
//
// The list is bounded: an item keeps the marks of its newest WithMarks keys (32
// by default; 19 bytes each), older ones cut in batches. A re-run is refused
// while its mark is kept, so the bound must exceed the number of other keys
// applied to the same item between a crash and the redelivery that finds it
// (about the lease plus the broker's redelivery delay): a hot item written by
// hundreds of keys a second wants a larger bound or another design. Every
// writer of the item must keep the list (write through Apply or ApplyPut, or
// leave the attribute alone). consumer.MarkCompleted is not used: the record
// lives in another item, which one request cannot also complete, so idemkit
// still sends the completion after the handler returns.
//
// Multi-item effects (TransactWriteItems) are not covered: the DynamoDB-protocol
// server this package is tested against (dynalite) has no transactions, and a
// path that cannot be tested is not offered. For them, write the effect with the
// attempt's fence, or keep the effect's records in PostgreSQL (package
// store/postgres gives transactional completion).
//
// # The operator plane
//
// Store implements admin.Store, so package admin's Inspector and the idemkit
// CLI list, count, inspect, unstick, forget and rerun its records, with the
// semantics of the Redis store (see consumer.OperatorOp): each transition is a
// read and an UpdateItem conditioned on the state, fence and owner read, and
// its note goes into the record's "notes" list, which every later transition
// keeps. A forgotten record keeps its fence, error history and notes; the next
// claim starts it afresh above that fence. A scan (ScanRecords) is a DynamoDB
// Scan of the whole table, Count items a step, keeping the items of the
// store's prefix: it reads (and is billed for) every item of every prefix.
//
// # The table and IAM
//
// CreateTable makes the table (on-demand unless TableSpec gives capacities)
// and enables TTL on "expires"; it is safe at every start-up. The permissions,
// on the records table (arn:aws:dynamodb:REGION:ACCOUNT:table/idemkit):
//
//   - Store: dynamodb:GetItem, dynamodb:PutItem, dynamodb:UpdateItem; for
//     the operator's scans (admin.Inspector's List and Stats), dynamodb:Scan.
//   - CreateTable: dynamodb:CreateTable, dynamodb:DescribeTable,
//     dynamodb:DescribeTimeToLive, dynamodb:UpdateTimeToLive.
//   - Apply and ApplyPut, on the table of the effect's item: dynamodb:UpdateItem
//     (Apply) or dynamodb:PutItem (ApplyPut), and dynamodb:GetItem.
//
// A policy for the store alone:
//
//	{"Effect": "Allow",
//	 "Action": ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"],
//	 "Resource": "arn:aws:dynamodb:eu-west-1:123456789012:table/idemkit"}
//
// # Module
//
// This package is its own Go module, so that the AWS SDK stays out of the
// dependencies of users of the rest of idemkit. It needs the SDK's DynamoDB
// client and nothing else of AWS; credentials and region come from however the
// application builds its client.
package dynamodb
