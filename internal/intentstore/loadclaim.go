package intentstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
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

// LoadClaim reads an intent and, if rules say the dispatcher would attempt
// it without a second look, claims it from pending in the same statement,
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
			b := &pgx.Batch{}
			results := make([]*loadClaimResult, len(sorted))
			for i, cl := range sorted {
				results[i] = queueLoadClaim(b, cl.req)
			}
			if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
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
	b := &pgx.Batch{}
	res := queueLoadClaim(b, req)
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return Loaded{}, fmt.Errorf("intentstore: load and claim intent %d: %w", req.id, err)
	}
	return res.loaded()
}

// loadClaimResult receives what one LoadClaim's statement returns.
type loadClaimResult struct {
	found bool
	out   Loaded
}

func (r *loadClaimResult) loaded() (Loaded, error) {
	if !r.found {
		return Loaded{}, pgx.ErrNoRows
	}
	return r.out, nil
}

func queueLoadClaim(b *pgx.Batch, req loadClaimReq) *loadClaimResult {
	res := &loadClaimResult{}
	a := req.rules
	loadClaimQ.queue(b, pgx.NamedArgs{
		"id": req.id, "now": req.now, "namespace": a.namespace, "max_attempts": a.maxAttempts,
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
