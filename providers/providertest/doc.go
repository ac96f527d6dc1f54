// Package providertest is the conformance suite every provider adapter runs:
// the HTTP adapters against their own test doubles, the broker adapters
// against a throwaway queue or stream on the real broker. It checks the
// contract the dispatcher relies on, one area at a time: the declaration,
// validation naming the field, redaction hiding what it must, success
// carrying a provider reference and acting once, a refusal failing for
// good, each fault classified the way DESIGN.md's outcome table says for a
// provider with or without an idempotency key, and, for an adapter that
// reconciles, the intent's identity at the provider (DESIGN.md, invariant
// 1): Perform carries the namespace and key in the request's metadata, and
// Reconcile never finds an object that carries the same key under another
// namespace.
//
// Not every target can show every behaviour (a real broker cannot be made
// to answer 429), so Harness.Features says what the adapter and its target
// support, and a subtest whose feature is off is skipped with a message
// naming the feature: `go test -v` shows what an adapter leaves unproven.
// The areas are not exported: an adapter runs the whole suite through Run,
// never a part it picked.
package providertest
