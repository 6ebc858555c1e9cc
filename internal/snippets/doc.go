// Package snippets holds the test that compiles every Go snippet of the
// repository's documentation (README.md, docs/*.md, examples/*/README.md), so that
// what a reader copies builds against the current API.
//
// Each ```go block becomes a package of its own in a temporary directory inside
// the module whose imports it needs (the root module; store/dynamodb for the
// DynamoDB store; internal/bench/plugins, which requires both observability
// plugins, for contrib/idemprom and contrib/idemotel), built and vetted there with
// GOWORK=off. A block of declarations is a file as it stands; a block of
// statements is the body of a function func(ctx context.Context) error. Packages
// are imported by the names the snippets use (the table in imports_test.go), and
// the helper names a snippet uses without defining them (rdb, store, Payment,
// charge, ...) are declared by the prelude (prelude_test.go), which says each
// one's type. A variable a fragment declares and never reads (the snippet shows
// a call, not what is done with its result) is read by a line the test adds after
// it; everything else must compile as written. Compiler positions are the
// documents' own lines.
package snippets
