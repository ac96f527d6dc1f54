package intentstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
)

// The queue: every intent recorded pending, released from waiting, resent
// by an operator or found absent by a look-up is queued (migration 013),
// and a dispatcher claims queued pending intents in batches (ClaimQueued):
// no River job is written for them. A queued intent leaves the queue when
// it finishes, goes in_doubt, needs a later attempt (a River job scheduled
// at its retry time, written by the settlement: Settlement.RetryAt), needs
// a second look before a call (ClaimQueued hands it to a River job), or
// its claim outlives every dispatcher that could hold it (HandOverStale).
// So at any time an unfinished intent belongs to the queue or to River,
// never both: a River job that finds its intent queued leaves it
// (LoadClaim claims only intents that are not queued).

// QueueChannel is the notification channel, in the current schema, that
// wakes the dispatchers when intents are queued: "<schema>.outbox_queue".
// A notification sent in a transaction is delivered when (and only if) it
// commits.
const QueueChannel = "outbox_queue"

// queueNotifySQL wakes the dispatchers listening on QueueChannel.
const queueNotifySQL = `SELECT pg_notify(current_schema() || '.` + QueueChannel + `', '')`

// QueueChannelSQL returns the statement that names the channel, for the
// LISTEN of a dispatcher: its single column is the channel's name.
const QueueChannelSQL = `SELECT current_schema() || '.` + QueueChannel + `'`

// ClaimBatch is what one ClaimQueued claimed.
type ClaimBatch struct {
	// Claimed are the intents the batch holds, each as it was before the
	// claim, with its claim; in id order.
	Claimed []Loaded
	// HandedOver counts the queued intents the batch found that need a
	// second look before a call (ClaimRules: an earlier attempt may have
	// acted, the budget is used, the key must be hashed to fit): they
	// were given to River dispatch jobs instead.
	HandedOver int
	// Token tells this batch's claims from any other's (ReleaseUnsent).
	Token int64
}

// ClaimQueued claims, in one statement committed before it returns, up to
// limit queued pending intents of the providers rules serves, oldest
// first, skipping any another transaction holds: each is moved to
// dispatching under a new attempt, as LoadClaim claims one, at now. Those
// of the batch that rules do not allow to be attempted at once are handed
// to River dispatch jobs in the same statement. Every call a claim allows
// follows its commit.
//
// An error may leave the claim committed with its answer lost (the
// connection dropped after the commit): the caller, which called nothing,
// then releases it by the batch's token (ReleaseUnsent), which the error
// carries (ClaimLostError).
func (s *Store) ClaimQueued(ctx context.Context, rules *ClaimRules, limit int, now time.Time) (ClaimBatch, error) {
	if limit <= 0 {
		return ClaimBatch{}, nil
	}
	a := rules.args()
	out := ClaimBatch{Token: rand.Int64()}
	b := claimBatch()
	claimQueuedQ.queue(b, s.jobArgs(pgx.NamedArgs{
		"limit": limit, "now": now, "token": out.Token, "namespace": a.namespace, "max_attempts": a.maxAttempts,
		"kinds": a.kinds, "kind_max_attempts": a.kindMaxAttempts, "providers": a.providers, "max_key_lengths": a.providerKeyLimit,
	})).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var (
				attempt   *int
				key, ns   *string
				firstUsed *time.Time
			)
			r, err := scanRowWith(rows, &attempt, &key, &ns, &firstUsed)
			if err != nil {
				return err
			}
			if attempt == nil {
				out.HandedOver++
				continue
			}
			c := &Claim{Attempt: *attempt, ProviderKey: *key, Namespace: *ns, KeyFirstUsedAt: *firstUsed}
			out.Claimed = append(out.Claimed, Loaded{Row: r, Claim: c})
		}
		return rows.Err()
	})
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return ClaimBatch{Token: out.Token}, &ClaimLostError{Token: out.Token, Err: fmt.Errorf("intentstore: claim queued intents: %w", err)}
	}
	// Only now has the claim committed.
	return out, nil
}

// ClaimLostError is a claim whose outcome is unknown: it may have
// committed, its answer lost. Token names it for ReleaseUnsent.
type ClaimLostError struct {
	Token int64
	Err   error
}

func (e *ClaimLostError) Error() string { return e.Err.Error() }
func (e *ClaimLostError) Unwrap() error { return e.Err }

// claimToken returns the token of a claim whose error err is, if it
// carries one.
func claimToken(err error) (int64, bool) {
	var lost *ClaimLostError
	if errors.As(err, &lost) {
		return lost.Token, true
	}
	return 0, false
}

// HandOverStale gives to River dispatch jobs the queued intents whose
// claim started before claimedBefore and never settled: their
// dispatcher stopped during the call, or lost the connection and never
// came back (a live dispatcher settles every claim within its call
// timeout, and retries the settlement for SettleRetryFor). The job takes
// the intent over as after a crash. It returns how many it handed over.
func (s *Store) HandOverStale(ctx context.Context, claimedBefore time.Time, limit int) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, handOverStaleSQL, s.jobArgs(pgx.NamedArgs{
		"before": claimedBefore, "limit": limit,
	})).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("intentstore: hand stale claims over to River: %w", err)
	}
	return n, nil
}

// claimQueuedSQL is ClaimQueued's one statement. picked takes the oldest
// queued pending intents of the providers served, skipping those another
// transaction holds: for each provider, the front of its part of
// outbox_intents_unfinished_idx (queued, provider, id), so that the queued
// intents of a provider no dispatcher here serves are never read; then the
// oldest of those. The row comparison and the order name the index's
// columns so that the plan reads that index whatever the statistics say:
// taken before a backlog's drain, they had the planner walk the primary
// key and filter, through every intent the drain had finished. It reads each row as it locked it, the newest version,
// and everything after it is decided from those values (the statement's
// snapshot may be older: an intent resent meanwhile has a new key
// generation). claimed claims those the rules allow to be attempted at
// once, as loadClaimSQL claims one, and opens their attempts in their rows
// (a first attempt writes no other row); handed gives the others to River
// dispatch jobs. The claim changes no indexed column, so it is a HOT update
// when the page has room. The rows returned are the intents as picked read
// them, before the claim, with, for each claimed one, its claim, and for
// each handed over, none (River's producers find those jobs at their next
// poll, FetchPollInterval).
var claimQueuedSQL = `
WITH picked AS (
    SELECT q.*
    FROM unnest(@providers::text[]) AS p(name)
    CROSS JOIN LATERAL (
        SELECT * FROM outbox_intents
        WHERE finished_at IS NULL AND (queued, provider, id) > (true, p.name, 0) AND queued AND provider = p.name
          AND state = 'pending'
        ORDER BY queued, provider, id
        LIMIT @limit
        FOR NO KEY UPDATE SKIP LOCKED
    ) q
    ORDER BY q.id
    LIMIT @limit
),
` + claimRulesCTE(`picked i`, `true`) + `,
claimed AS (
    ` + claimFromPending + `
    RETURNING i.id AS claimed_id, i.attempt_count AS claim_attempt, i.provider_key AS claim_key,
        coalesce(i.key_namespace, '') AS claim_namespace, i.key_first_used_at AS claim_first_used
),
` + archiveLatestCTE(`SELECT claimed_id FROM claimed`, `false`) + `,
handed AS (
    UPDATE outbox_intents i
    SET queued = false, updated_at = now()
    WHERE i.id = ANY(ARRAY(SELECT id FROM picked EXCEPT SELECT claimed_id FROM claimed))
    RETURNING i.id
),
inserted AS (
    SELECT id FROM handed
),
` + insertJobsCTE + `
SELECT ` + intentColumns + `, c.claim_attempt, c.claim_key, c.claim_namespace, c.claim_first_used
FROM picked
LEFT JOIN claimed c ON c.claimed_id = picked.id
ORDER BY picked.id`

// handOverStaleSQL gives the queued claims started before @before to River
// dispatch jobs (see HandOverStale), oldest first. River's producers find
// the jobs at their next poll: a take-over is never in a hurry.
var handOverStaleSQL = `
WITH stale AS (
    SELECT id FROM outbox_intents
    WHERE finished_at IS NULL AND queued AND state = 'dispatching' AND attempt_started_at < @before
    ORDER BY id
    LIMIT @limit
    FOR NO KEY UPDATE SKIP LOCKED
),
handed AS (
    UPDATE outbox_intents i
    SET queued = false, updated_at = now()
    FROM stale s
    WHERE i.id = s.id
    RETURNING i.id
),
inserted AS (
    SELECT id FROM handed
),
` + insertJobsCTE + `
SELECT count(*) FROM handed`
