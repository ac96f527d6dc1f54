package intentstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/intents/intenttype"
)

// ClaimParams asks for a claim on an intent as the caller saw it.
type ClaimParams struct {
	// Row is the intent as loaded: its state (pending, or dispatching for a
	// take-over), attempt count and key generation guard the claim.
	Row Row
	// ProviderKey is the key to send if the intent has none yet for its
	// generation (intenttype.ProviderKey), with the Namespace it embeds.
	ProviderKey string
	Namespace   string
	// Now is the claim's time: the attempt's start, and the key window's
	// start for the first claim of a key generation.
	Now time.Time
}

// Claim is an attempt that holds an intent.
type Claim struct {
	// Attempt is the attempt's number, counted over the intent's life.
	Attempt int
	// ProviderKey and Namespace are what the provider must be sent.
	ProviderKey string
	Namespace   string
	// KeyFirstUsedAt is when the key's first attempt was claimed.
	KeyFirstUsedAt time.Time
}

// ErrClaimLost is returned by Claim when the intent is no longer as the
// caller saw it (another worker claimed it, an operator acted): the caller
// must not call the provider.
var ErrClaimLost = errors.New("intent changed before it could be claimed")

// takeOverError is recorded on an attempt found open when a new claim takes
// the intent over.
const takeOverError = "no outcome recorded: the dispatcher stopped during the call, or its settlement was lost"

// Claim moves a pending intent to dispatching under a new attempt, or takes
// over a dispatching intent whose attempt was never settled (closing that
// attempt as ambiguous and recording that the provider may have acted), in
// one statement committed before the provider is called. Returns
// ErrClaimLost when the intent moved meanwhile.
func (s *Store) Claim(ctx context.Context, p ClaimParams) (Claim, error) {
	from := p.Row.State
	if from != intenttype.StatePending && from != intenttype.StateDispatching {
		return Claim{}, fmt.Errorf("intentstore: cannot claim intent %d from %s", p.Row.ID, from)
	}
	var c Claim
	err := s.pool.QueryRow(ctx, claimSQL, pgx.NamedArgs{
		"id":              p.Row.ID,
		"from":            from,
		"seen_attempts":   p.Row.AttemptCount,
		"seen_generation": p.Row.KeyGeneration,
		"provider_key":    p.ProviderKey,
		"namespace":       p.Namespace,
		"now":             p.Now,
		"take_over":       from == intenttype.StateDispatching,
		"take_over_error": takeOverError,
	}).Scan(&c.Attempt, &c.ProviderKey, &c.Namespace, &c.KeyFirstUsedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Claim{}, ErrClaimLost
	}
	if err != nil {
		return Claim{}, fmt.Errorf("intentstore: claim intent %d: %w", p.Row.ID, err)
	}
	return c, nil
}
