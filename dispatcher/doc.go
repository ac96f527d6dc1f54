// Package dispatcher performs recorded intents exactly once, as River
// workers on the same Postgres.
//
// Each intent gets one River job (intenttype.DispatchArgs). The job is only
// the trigger: the intent row is the system of record, and a job whose intent
// is already terminal or in_doubt does nothing. One attempt goes like this:
//
//   - Provider with an idempotency key (Stripe): the intent's key goes with
//     every call, so a repeat after a lost response is answered with the first
//     result. No write-ahead commit is needed; evidence of an earlier attempt
//     comes from the attempt count and River's job attempt. Once the
//     provider's key window (measured conservatively from the intent's
//     creation) has passed, an intent that may already have been attempted is
//     ambiguous instead of being repeated.
//   - Provider without a key (SendGrid): the attempt is committed as started,
//     and the intent as dispatching, before the call. An intent found
//     dispatching means a dispatcher stopped during a call: ambiguous.
//   - The outcome (providers.Outcome) decides the next state. Succeeded and
//     failed are terminal; retry schedules another attempt with exponential
//     backoff and jitter (or after the provider's Retry-After); ambiguous is
//     reconciled against the provider where it can be asked, and otherwise
//     held in_doubt for an operator. It is never blindly repeated.
//   - The outcome, its attempt row and the completion of the job commit in
//     one transaction (River's JobCompleteTx), so a job re-run after a lost
//     completion finds its intent terminal and does nothing.
//
// Attempts per intent are bounded (Config.MaxAttempts). A periodic sweep,
// run by River's elected leader, re-enqueues any pending or dispatching
// intent that has no live job, so no intent is ever stranded.
package dispatcher
