// Package dispatcher performs recorded intents, each effect at most once and
// none lost, on the same Postgres, with River for what needs a later time.
//
// The intent row is the queue entry: recording writes no job. A dispatcher
// claims the queued intents itself, a batch at a time, oldest first, in one
// statement committed before any call (intentstore.ClaimQueued), woken by a
// notification from the recording transaction's commit and polling as a
// fallback, and works each in a goroutine of its own. River keeps what
// needs a later time or a second look: a retry after its backoff, the
// take-over of a claim whose dispatcher stopped, the look-ups of in_doubt
// intents, and the maintenance (sweep, retention, roll-ups), run by its
// elected leader. An unfinished intent belongs to the queue or to one
// River dispatch job (intentstore.DispatchArgs), never both; the row is the
// system of record either way, and a job whose intent is queued, terminal
// or in_doubt does nothing. Every decision is taken from the row alone
// (never from River's attempt counter, which restarts when a job is
// replaced); every write goes through internal/intentstore, the one owner
// of the intent's state machine. One attempt goes like this:
//
//   - Claim: the intent moves to dispatching under a new attempt number, in
//     one statement committed before the call, for every provider (a
//     queue's batch shares that commit, and so do the claims of River's
//     workers that start together). The first claim of a key generation
//     fixes the key the provider is sent
//     (intenttype.ProviderKey: the deployment's namespace, the generation,
//     the intent's key) and starts its key window.
//   - Call: a provider with an idempotency key (Stripe) gets the same key on
//     every attempt, so a repeat after a lost response is answered with the
//     first result. A provider without one (SendGrid) is never called again
//     after an attempt that may have reached it.
//   - Settle: the outcome (providers.Outcome) decides the next state, and
//     applies only while the attempt still holds the claim. An attempt that
//     may have reached the provider (anything but proof that it did not:
//     providers.AttemptError.DidNotAct) is remembered for good. Succeeded and
//     failed are terminal; retry schedules another attempt, a River job, with
//     exponential backoff and jitter (or after the provider's Retry-After);
//     ambiguous is reconciled against the provider.
//   - Reconcile: the provider is asked by the namespace and key carried in
//     its metadata. Found: succeeded. Absence proven by a consistent read,
//     once no request can still be in progress: pending under a new key.
//     Otherwise in_doubt, looked up again later (Recheck), then left to an
//     operator. Running out of attempts, a refusal after a possible effect,
//     and a key window that has passed all go here, never to failed.
//   - The outcome, its attempt row, the end of the River job that ran it
//     (if one did) and what comes next (queued again, or a later attempt's
//     job) commit in one transaction, sent again on a transient database
//     error, so a known outcome is not lost and a job re-run after a lost
//     commit finds its intent terminal and does nothing. Outcomes that
//     finish while another settlement is committing share the next
//     transaction (group commit), each under its own guard.
//
// An intent found dispatching was claimed by an attempt that never settled
// (a crash, a lost settlement): within a keyed provider's window the next
// attempt takes it over with the same key; otherwise it is reconciled. A
// queued claim older than Config.RescueStuckJobsAfter is handed to a River
// job for that by the sweep, as River's rescuer runs a stuck job again.
//
// Config.FetchLoops fetch loops claim for the queue; Config.MaxWorkers
// bounds the intents worked at once, by the queue and River together.
//
// Attempts per intent are bounded (Config.MaxAttempts); an operator's resend
// grants a fresh budget. A periodic sweep, run by River's elected leader,
// hands stale queued claims over and re-enqueues any intent River holds
// that lost its job, so no intent is ever stranded.
package dispatcher
