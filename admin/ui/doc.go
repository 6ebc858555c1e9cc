// Package ui is idemkit's operator web UI: one http.Handler a service mounts
// under a path of its choice, over an admin.Inspector.
//
//	in, _ := admin.New(store)
//	h, err := ui.New(in, ui.WithPrefix("/idemkit"),
//		ui.WithActor(func(r *http.Request) (string, error) { return userFrom(r) }))
//	mux.Handle("/idemkit/", h)
//
// The idemkit command serves the same handler: idemkit ui --listen 127.0.0.1:8080.
//
// # Pages
//
//   - Overview: records by scope and state, started records whose lease ran
//     out, failed records by error kind, the oldest started record, the recent
//     operator actions (see below); it reloads itself (WithRefresh).
//   - Records: the records a filter selects (scope, state, age, error kind, owner
//     prefix, key prefix, lease ran out), paged by the store's own cursor with
//     admin.Inspector.List: a page reads at most 20,000 records, never the whole
//     store, and shows at most 500, each once. On Redis a record may show on two
//     pages, as SCAN may return a key twice while the server resizes its table.
//     Its columns are those of idemkit list.
//   - Record: everything idemkit inspect shows. The stored result is hidden until
//     asked for (it may hold personal data).
//   - Replay plans: the JSON files idemkit plan --out wrote in a directory
//     (WithPlans), read-only.
//
// # Counting
//
// A view of the overview counts at most WithSample records itself (default
// 2,000) with admin.Inspector.Stats, so it costs a couple of bounded scan steps
// on any store. A store of no more records gets exact, live counts on every
// view. A larger one is counted in full in the background, one count at a time,
// started by the first view that needs it and again by the first view that finds
// the last one older than WithCountEvery (default 1m); the overview shows the
// newest full count with its age, and until the first one is done, the view's
// sample, marked as one (a scan's order has nothing to do with a record's state
// or age, so a sample's proportions hold for the whole), with the number of keys
// the server holds when the store can say (Redis). Close stops a running count.
//
// # Recent operator actions
//
// The overview's recent actions are read from the store, so a change made
// anywhere shows: through this handler, another UI process over the same store,
// idemkit, a service's own admin code. They are the operator notes ("<op> by
// <actor>: <reason>", split at the first colon after the actor) of the records
// the count the overview shows read, the newest 200 of them, at no read of their
// own: on a store of at most WithSample records, every record's, now; on a
// larger one, the full count's, as old as it is, or until the first one is done,
// the sample's. The same note on several records in one scope, each within a
// minute of the next, is one line (a bulk action writes one per record). A
// handler also keeps its own last 50 changes, and shows each, marked, until a
// count of every record that began after it has read it back: an operator sees
// their change at once. On a larger store a change made elsewhere shows after
// the next full count (WithCountEvery), or, with background counts off, only if
// the sample holds its record. Refused changes changed nothing and are not
// listed; WithLogger logs them.
//
// # Changes
//
// The UI is read-only unless WithActor names the person behind a request. Then
// every record page offers unstick, forget and rerun, and the Records page the
// same on every record its filter selects. A change acts in the scope its page
// names, and in the store's own when it names none (a bulk action with no scope
// filter), so with WithActor, New refuses a store left on consumer.DefaultScope,
// with an error matching consumer.ErrDefaultScope that says to give the store
// consumer.WithScope(<the service's name>): the rule of the broker adapters and
// of idemkit's commands that change records (consumer.Settings.CheckScope). A
// read-only UI takes a store on any scope: it reads every scope. Each change needs a reason, which is
// recorded in the record with the actor's name (admin's operator notes). A single
// change carries the fence the page showed as its precondition: a record that
// moved on meanwhile is left alone and the page says so. A bulk change is
// previewed first (admin.Inspector.Preview): the operator sees how many records
// it changes and must type that count to confirm; it is then executed only if a
// fresh preview finds the same records at the same fences, and each record is
// changed only if it still holds its fence (admin.Inspector.Execute).
//
// # Safety
//
// Every change is a POST guarded by net/http's CrossOriginProtection: a request
// from another origin is refused (403). Every response carries a strict
// Content-Security-Policy (scripts and styles from the handler's own embedded
// files only, no inline script, no framing), every piece of record text goes
// through html/template's escaping, robots.txt disallows everything, and no
// stored result is rendered unless asked for. Nothing is built with JavaScript
// tooling: the pages are html/template, the script and style sheet are small
// embedded files, so go get is all a service needs.
package ui
