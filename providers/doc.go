// Package providers is the contract between the outbox and the external
// systems it causes effects in.
//
// A Provider knows one external API (Stripe, SendGrid, ...) and nothing of the
// outbox's tables or scheduling. It declares the intent kinds it performs,
// validates their payloads when a consumer records them (so nothing
// unperformable is ever stored), says whether the API accepts an idempotency
// key and for how long the key is remembered, performs one attempt, and
// classifies what happened into an Outcome the dispatcher acts on:
//
//   - OutcomeSucceeded: the provider performed the effect;
//   - OutcomeRetry: the provider did not act, or the attempt can be repeated
//     safely because the intent's idempotency key protects it;
//   - OutcomeFailed: a permanent refusal (validation, auth, a card decline);
//   - OutcomeAmbiguous: the provider may have acted and a repeat could do it
//     twice. The dispatcher reconciles or holds the intent in_doubt.
//
// Every adapter runs the conformance suite in package providertest: the HTTP
// adapters against their test doubles, the broker adapters against the real
// broker, each skipping only what its target cannot show.
package providers
