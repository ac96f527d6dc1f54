package intentstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/intents/intenttype"
)

// ClaimRules say when a dispatcher attempts a pending intent without a
// second look, so that LoadClaim can claim it in the statement that loads
// it: the intent is pending, no earlier attempt may have acted, its budget
// has attempts left, its provider is served here, and its provider key is
// known or derived whole (intenttype.ProviderKey without the hash that
// fits a long key). Any other intent is loaded and left as it is, for the
// dispatcher to decide and, if it attempts it, Claim.
type ClaimRules struct {
	// Namespace is the deployment's, which the derived key embeds.
	Namespace string
	// MaxAttempts is the attempt budget, MaxAttemptsByKind its overrides.
	MaxAttempts       int
	MaxAttemptsByKind map[string]int
	// MaxKeyLength is, for every provider served here (by name), the
	// longest key it accepts (intenttype.MaxKeyLength when it sets none).
	MaxKeyLength map[string]int

	once   sync.Once
	params ruleArgs
}

// AttemptsAtOnce is the rule in Go: whether LoadClaim claims row, as
// loaded, under these rules. loadClaimSQL states the same conditions over
// the row as the statement finds it (TestLoadClaimAgreesWithAttemptsAtOnce
// checks that the two agree on any row), and the dispatcher attempts, at
// once, every intent this holds for (TestAttemptsAtOnceIsAnAttempt).
func (r *ClaimRules) AttemptsAtOnce(row Row) bool {
	limit, served := r.MaxKeyLength[row.Provider]
	if !served {
		return false
	}
	if limit <= 0 || limit > intenttype.MaxKeyLength {
		limit = intenttype.MaxKeyLength
	}
	budget := r.MaxAttempts
	if b, ok := r.MaxAttemptsByKind[row.Kind]; ok {
		budget = b
	}
	derivedWhole := len(r.Namespace+"."+strconv.Itoa(row.KeyGeneration)+"/"+row.Key) <= limit
	return row.State == intenttype.StatePending && !row.MayHaveActed && row.AttemptsUsed() < budget &&
		(row.ProviderKey != "" || derivedWhole)
}

// ruleArgs are a ClaimRules as loadClaimSQL's parameters.
type ruleArgs struct {
	namespace        string
	maxAttempts      int
	kinds            []string
	kindMaxAttempts  []int
	providers        []string
	providerKeyLimit []int
}

// args returns the rules as parameters, computed once: a dispatcher
// passes the same rules with every LoadClaim, and must not change them.
func (r *ClaimRules) args() *ruleArgs {
	r.once.Do(func() { r.params = r.buildArgs() })
	return &r.params
}

func (r *ClaimRules) buildArgs() ruleArgs {
	a := ruleArgs{namespace: r.Namespace, maxAttempts: r.MaxAttempts}
	for _, kind := range slices.Sorted(maps.Keys(r.MaxAttemptsByKind)) {
		a.kinds = append(a.kinds, kind)
		a.kindMaxAttempts = append(a.kindMaxAttempts, r.MaxAttemptsByKind[kind])
	}
	for _, name := range slices.Sorted(maps.Keys(r.MaxKeyLength)) {
		limit := r.MaxKeyLength[name]
		if limit <= 0 || limit > intenttype.MaxKeyLength {
			limit = intenttype.MaxKeyLength
		}
		a.providers = append(a.providers, name)
		a.providerKeyLimit = append(a.providerKeyLimit, limit)
	}
	return a
}

// loadClaimReq is one LoadClaim.
type loadClaimReq struct {
	id    int64
	rules *ruleArgs
	now   time.Time
}

// Loaded is an intent as LoadClaim read it, with the claim it made, if any.
type Loaded struct {
	// Row is the intent as it was before any claim.
	Row Row
	// Claim is the attempt that now holds the intent; nil when LoadClaim
	// did not claim it (see ClaimRules).
	Claim *Claim
}

// LoadClaim reads an intent and, if it is not queued (a River dispatch job
// works it: see ClaimQueued) and rules say the dispatcher would attempt it
// without a second look, claims it from pending in the same statement,
// as Claim does, at now (one round trip instead of a load and a claim).
// pgx.ErrNoRows when there is no such intent. LoadClaims made at the same
// time (the workers of one fetch) share a transaction, each under its own
// guard, and LoadClaim returns only once it has committed: the call a claim
// allows always follows its commit.
func (s *Store) LoadClaim(ctx context.Context, id int64, rules *ClaimRules, now time.Time) (Loaded, error) {
	if err := ctx.Err(); err != nil {
		return Loaded{}, err
	}
	return s.loadClaims.do(context.WithoutCancel(ctx), loadClaimReq{id: id, rules: rules.args(), now: now})
}

// maxLoadClaimGroup bounds the LoadClaims committed in one transaction.
const maxLoadClaimGroup = 128

// loadClaimGroup runs a group of LoadClaims in one transaction, in intent id
// order (see settleGroup); if it fails for a reason other than a transient
// error, each is run alone.
func (s *Store) loadClaimGroup(ctx context.Context, group []*call[loadClaimReq, Loaded]) {
	runOrdered(ctx, group, "load and claim", func(r loadClaimReq) int64 { return r.id }, s.loadClaimAlone,
		func(ctx context.Context, sorted []*call[loadClaimReq, Loaded]) error {
			b := claimBatch()
			results := make([]*loadClaimResult, len(sorted))
			for i, cl := range sorted {
				results[i] = queueLoadClaim(b, cl.req)
			}
			if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
				for i, cl := range sorted {
					cl.err = &ClaimLostError{Token: results[i].token, Err: err}
				}
				return err
			}
			// Only now has the transaction committed.
			for i, cl := range sorted {
				cl.res, cl.err = results[i].loaded()
			}
			return nil
		})
}

func (s *Store) loadClaimAlone(ctx context.Context, req loadClaimReq) (Loaded, error) {
	b := claimBatch()
	res := queueLoadClaim(b, req)
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return Loaded{}, &ClaimLostError{Token: res.token, Err: fmt.Errorf("intentstore: load and claim intent %d: %w", req.id, err)}
	}
	return res.loaded()
}

// loadClaimResult receives what one LoadClaim's statement returns.
type loadClaimResult struct {
	found bool
	out   Loaded
	token int64
}

func (r *loadClaimResult) loaded() (Loaded, error) {
	if !r.found {
		return Loaded{}, pgx.ErrNoRows
	}
	return r.out, nil
}

func queueLoadClaim(b *pgx.Batch, req loadClaimReq) *loadClaimResult {
	res := &loadClaimResult{token: rand.Int64()}
	a := req.rules
	loadClaimQ.queue(b, pgx.NamedArgs{
		"id": req.id, "now": req.now, "token": res.token, "namespace": a.namespace, "max_attempts": a.maxAttempts,
		"kinds": a.kinds, "kind_max_attempts": a.kindMaxAttempts,
		"providers": a.providers, "max_key_lengths": a.providerKeyLimit,
	}).QueryRow(func(row pgx.Row) error {
		var (
			attempt   *int
			claimUsed *time.Time
			key, ns   *string
		)
		r, err := scanRowWith(row, &attempt, &key, &ns, &claimUsed)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		res.found, res.out.Row = true, r
		if attempt != nil {
			res.out.Claim = &Claim{Attempt: *attempt, ProviderKey: *key, Namespace: *ns, KeyFirstUsedAt: *claimUsed}
		}
		return nil
	})
	return res
}

// loadClaimSQL reads an intent (the columns of loadSQL, as they were before
// this statement) and, when it is not queued and ClaimRules say the
// dispatcher would attempt it without a second look, claims it from
// pending as claimSQL does: the claim's columns are NULL when it did not.
// The rules (claimRulesCTE, claimFromPending): pending, no attempt that
// may have acted, attempts left in the budget (@max_attempts, or the
// kind's), a provider served here (@providers), and a provider key already
// fixed or derived whole within the provider's limit (@max_key_lengths):
// "namespace.generation/key", as intenttype.ProviderKey derives it when it
// fits. The guard is re-checked on the row as it is when the update runs,
// so of two jobs for one intent only one claims it.
var loadClaimSQL = `
WITH ` + claimRulesCTE(`outbox_intents i`, `i.id = @id`) + `,
claimed AS (
    ` + claimFromPending + `
      AND i.state = 'pending'
      AND NOT i.queued
    RETURNING i.id AS claimed_id, i.attempt_count AS claim_attempt, i.provider_key AS claim_key,
        coalesce(i.key_namespace, '') AS claim_namespace, i.key_first_used_at AS claim_first_used
),
` + archiveLatestCTE(`SELECT claimed_id FROM claimed`, `false`) + `
SELECT ` + intentColumns + `, c.claim_attempt, c.claim_key, c.claim_namespace, c.claim_first_used
FROM outbox_intents
LEFT JOIN claimed c ON true
WHERE outbox_intents.id = @id`

// claimRulesCTE is "rules": for each intent of from (a relation of
// intents' rows, named i) that which (a condition on i) selects, of a
// provider served here, what ClaimRules allow it: its attempt budget and
// its provider's longest key, and the key derived for it whole, from the
// key generation it was read at (claimFromPending claims it only at that
// generation).
func claimRulesCTE(from, which string) string {
	return `rules AS (
    SELECT i.id, i.key_generation,
        coalesce(k.max_attempts, @max_attempts::integer) AS max_attempts,
        p.max_key_length,
        @namespace::text || '.' || i.key_generation::text || '/' || i.idempotency_key AS derived_key
    FROM ` + from + `
    JOIN unnest(@providers::text[], @max_key_lengths::integer[]) AS p(name, max_key_length) ON p.name = i.provider
    LEFT JOIN unnest(@kinds::text[], @kind_max_attempts::integer[]) AS k(kind, max_attempts) ON k.kind = i.kind
    WHERE ` + which + `
)`
}

// claimFromPending claims, at @now under the claim @token, the intents of
// "rules" whose row the rules allow to be attempted at once: the update
// ClaimRules.AttemptsAtOnce describes, to which a statement adds the
// conditions of its own and its RETURNING.
var claimFromPending = `UPDATE outbox_intents i
    SET state = 'dispatching',
        attempt_count = i.attempt_count + 1,
        claimed_attempt = i.attempt_count + 1,
        provider_key = coalesce(i.provider_key, r.derived_key),
        key_namespace = CASE WHEN i.provider_key IS NULL THEN @namespace::text ELSE i.key_namespace END,
        key_first_used_at = coalesce(i.key_first_used_at, @now),
        ` + openAttempt + `,
        claim_token = @token,
        updated_at = now()
    FROM rules r
    WHERE i.id = ANY(ARRAY(SELECT id FROM rules)) AND i.id = r.id
      AND i.key_generation = r.key_generation
      AND NOT i.may_have_acted
      AND i.attempt_count - i.budget_from < r.max_attempts
      AND (i.provider_key IS NOT NULL OR octet_length(r.derived_key) <= r.max_key_length)`
