package chaos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/intents/audit"
	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
	"github.com/outboxkit/outbox/providers/stripeprovider"
	"github.com/outboxkit/outbox/providers/stripeprovider/stripedouble"
)

// postControl posts to a control endpoint of the doubles' process.
func postControl(ctx context.Context, u string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("chaos: POST %s: %w", u, err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("chaos: POST %s: %s", u, resp.Status)
	}
	return nil
}

// createForeign creates, before the run and with the faults still off, n
// PaymentIntents of another deployment (ForeignNamespace) with the intent
// ids 1 to n (row ids repeat across databases, so every intent of the run
// meets one with its own id), each with the amount, customer and message
// id of one of the run's payments and, as outbox_key, the very key this
// deployment's payment for that message will be sent under. Only the
// namespace tells them apart. It returns how many it created.
func createForeign(ctx context.Context, pool *pgxpool.Pool, a DoublesAddrs, msgs []message, n int) (int, error) {
	if n == 0 || len(msgs) == 0 {
		return 0, nil
	}
	var ns string
	if err := pool.QueryRow(ctx, namespaceSQL).Scan(&ns); err != nil {
		return 0, fmt.Errorf("chaos: read the namespace: %w", err)
	}
	for i := range n {
		m := msgs[(i/2)%len(msgs)]
		key := intenttype.MessageKey(m.consumer, m.id, "payment")
		form := url.Values{
			"amount": {strconv.Itoa(m.amount)}, "currency": {"usd"}, "customer": {customerOf(m.id)},
			"payment_method": {"pm_card_visa"}, "confirm": {"true"},
			"automatic_payment_methods[enabled]": {"true"}, "automatic_payment_methods[allow_redirects]": {"never"},
			"metadata[" + stripeprovider.IntentIDMetadataKey + "]": {strconv.Itoa(i + 1)},
			"metadata[message_id]":                                 {m.id},
			"metadata[" + providers.MetadataNamespace + "]":        {ForeignNamespace},
			"metadata[" + providers.MetadataKey + "]":              {intenttype.ProviderKey(ns, 0, key, stripeprovider.MaxKeyLength)},
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.StripeURL+"/v1/payment_intents", strings.NewReader(form.Encode()))
		if err != nil {
			return i, err
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Authorization", "Bearer "+stripedouble.DefaultAPIKey)
		req.Header.Set("Idempotency-Key", intenttype.ProviderKey(ForeignNamespace, 0, key+"/"+strconv.Itoa(i), stripeprovider.MaxKeyLength))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return i, fmt.Errorf("chaos: create another deployment's PaymentIntent: %w", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return i, fmt.Errorf("chaos: create another deployment's PaymentIntent: %s", resp.Status)
		}
	}
	return n, nil
}

// storms starts n 503 storms of length each at the Stripe double, at random
// times within the chaos (of length chaos), one after the other.
func storms(ctx context.Context, a DoublesAddrs, n int, each, chaos time.Duration, rnd *rand.Rand, logger *slog.Logger) {
	if n == 0 {
		return
	}
	slot := chaos / time.Duration(n)
	start := time.Now()
	for i := range n {
		// Anywhere in the slot's first part, so the storm ends within it.
		room := max(slot-each, 0)
		at := start.Add(time.Duration(i)*slot + time.Duration(rnd.Int64N(int64(room)+1)))
		if !sleepUntil(ctx, at) {
			return
		}
		if err := postControl(ctx, a.StripeURL+StormPath+"?for="+each.String()); err != nil && ctx.Err() == nil {
			logger.Warn("storm", "error", err)
		}
	}
}

// Operator actions as counted in Report.OperatorActions: "<action> done",
// "<action> refused" (a *audit.TransitionError, as expected when the
// intent moved on or may have acted), "<action> error" (a connection the
// chaos cut).
const (
	actionCancel  = "cancel"
	actionResend  = "resend"
	actionResolve = "resolve"
)

// operator acts on random intents while the dispatchers work, as people
// would from the admin UI: cancels any intent, resends in_doubt and failed
// ones, and resolves in_doubt ones after checking the doubles' records
// (succeeded when the double has the effect, failed when it has none), but
// only once no request for the intent can still be executing there.
type operator struct {
	pool   *pgxpool.Pool
	audit  *audit.Store
	addrs  DoublesAddrs
	quiet  time.Duration
	logger *slog.Logger

	mu   sync.Mutex
	n    map[string]int
	errs []string // the first few errors that were not refusals
}

func newOperator(pool *pgxpool.Pool, reg *providers.Registry, a DoublesAddrs, callTimeout time.Duration, logger *slog.Logger) (*operator, error) {
	store, err := audit.New(pool, reg)
	if err != nil {
		return nil, err
	}
	return &operator{pool: pool, audit: store, addrs: a, quiet: absenceSettleTime(callTimeout), logger: logger, n: map[string]int{}}, nil
}

func (o *operator) run(ctx context.Context, every time.Duration, rnd *rand.Rand) {
	if every <= 0 {
		return
	}
	for {
		wait := every/2 + time.Duration(rnd.Int64N(int64(every)+1))
		if !sleepUntil(ctx, time.Now().Add(wait)) {
			return
		}
		var action string
		var err error
		switch r := rnd.Float64(); {
		case r < 0.4:
			action, err = actionCancel, o.cancel(ctx)
		case r < 0.7:
			action, err = actionResend, o.resend(ctx, rnd)
		default:
			action, err = actionResolve, o.resolve(ctx, rnd)
		}
		if errors.Is(err, errNothingToDo) {
			continue
		}
		var te *audit.TransitionError
		switch {
		case err == nil:
			o.count(action + " done")
		case errors.As(err, &te):
			o.count(action + " refused")
		case ctx.Err() != nil:
			return
		default:
			o.count(action + " error")
			o.mu.Lock()
			if len(o.errs) < 5 {
				o.errs = append(o.errs, action+": "+err.Error())
			}
			o.mu.Unlock()
			o.logger.Warn("operator", "action", action, "error", err)
		}
	}
}

var errNothingToDo = errors.New("nothing to act on")

const operatorActor = "chaos-operator"

// pick returns a random intent id among those matching cond (a SQL
// condition on outbox_intents).
func (o *operator) pick(ctx context.Context, cond string, args ...any) (id int64, kind string, err error) {
	err = o.pool.QueryRow(ctx, `SELECT id, kind FROM outbox_intents WHERE `+cond+` ORDER BY random() LIMIT 1`, args...).Scan(&id, &kind)
	if errors.Is(err, pgx.ErrNoRows) {
		err = errNothingToDo
	}
	return id, kind, err
}

// cancel cancels a random intent, whatever its state: most are refused
// (succeeded, dispatching, or may have acted).
func (o *operator) cancel(ctx context.Context) error {
	id, _, err := o.pick(ctx, "true")
	if err != nil {
		return err
	}
	_, err = o.audit.Cancel(ctx, id, operatorActor, "chaos: the customer asked to cancel")
	return err
}

// resend sends a random in_doubt or failed intent again, after checking,
// once no request for it can still be executing, that the double has no
// effect for it.
func (o *operator) resend(ctx context.Context, rnd *rand.Rand) error {
	id, kind, err := o.pick(ctx, "state IN ('in_doubt', 'failed') AND updated_at < now() - $1::bigint * interval '1 microsecond'", o.quiet.Microseconds())
	if err != nil {
		return err
	}
	seen, err := o.look(ctx, id)
	if err != nil {
		return err
	}
	if n, err := o.effectsAt(ctx, kind, id); err != nil || n != 0 {
		if err == nil {
			err = errNothingToDo // it happened: an operator resolves it instead
		}
		return err
	}
	return o.act(ctx, rnd, audit.Action{Kind: audit.ActionResend, IntentID: id, Actor: operatorActor,
		Reason: "chaos: checked the provider: no effect, try again", IfVersion: &seen})
}

// look reads the intent's version: what the operator saw, which guards
// what it then does (DESIGN.md, invariant 11).
func (o *operator) look(ctx context.Context, id int64) (intenttype.Version, error) {
	var v intenttype.Version
	err := o.pool.QueryRow(ctx, `SELECT key_generation, attempt_count FROM outbox_intents WHERE id = $1`, id).Scan(&v.KeyGeneration, &v.AttemptCount)
	if errors.Is(err, pgx.ErrNoRows) {
		err = errNothingToDo
	}
	return v, err
}

// act carries out a as an operator who looked a moment ago: it waits its
// reading time (up to a second), so the intent may have moved on, and
// sometimes sends the same action again, as a client whose answer was lost
// does: found applied, never applied twice.
func (o *operator) act(ctx context.Context, rnd *rand.Rand, a audit.Action) error {
	if !sleepUntil(ctx, time.Now().Add(time.Duration(rnd.Int64N(int64(time.Second))))) {
		return ctx.Err()
	}
	a.ActionID = fmt.Sprintf("chaos-%d-%d", a.IntentID, rnd.Uint64())
	_, err := o.audit.Act(ctx, a)
	var te *audit.TransitionError
	if errors.As(err, &te) && te.Seen != nil {
		o.count(string(a.Kind) + " refused: changed since seen")
	}
	if err == nil && rnd.IntN(4) == 0 {
		if _, again := o.audit.Act(ctx, a); again == nil {
			o.count(string(a.Kind) + " sent twice: applied once")
		} else {
			o.count(string(a.Kind) + " sent twice: the second refused")
			o.logger.Warn("operator: the same action sent again was not found applied", "action", a.Kind, "intent_id", a.IntentID, "error", again)
		}
	}
	return err
}

// resolve resolves a random in_doubt intent whose latest change is older
// than the quiet time, as the double's records show it.
func (o *operator) resolve(ctx context.Context, rnd *rand.Rand) error {
	id, kind, err := o.pick(ctx, "state = 'in_doubt' AND updated_at < now() - $1::bigint * interval '1 microsecond'", o.quiet.Microseconds())
	if err != nil {
		return err
	}
	seen, err := o.look(ctx, id)
	if err != nil {
		return err
	}
	n, err := o.effectsAt(ctx, kind, id)
	if err != nil {
		return err
	}
	as := intenttype.StateFailed
	reason := "chaos: checked the provider: no effect"
	switch n {
	case 0:
	case 1:
		as, reason = intenttype.StateSucceeded, "chaos: checked the provider: it has the effect"
	default:
		return errNothingToDo // a duplicate: verify reports it; nobody should resolve it
	}
	a := audit.Action{Kind: audit.ActionResolve, IntentID: id, As: as, Actor: operatorActor, Reason: reason, IfVersion: &seen}
	if as == intenttype.StateSucceeded && kind == stripeprovider.KindPaymentIntent {
		// As the docs ask of an operator: with the PaymentIntent found, so
		// that a refund or capture that fills from it is released.
		if a.ProviderRef, err = o.paymentIntentOf(ctx, id); err != nil {
			return err
		}
	}
	return o.act(ctx, rnd, a)
}

// paymentIntentOf is the id of this deployment's PaymentIntent for intent
// id at the double.
func (o *operator) paymentIntentOf(ctx context.Context, id int64) (string, error) {
	objs, err := stripeObjects(ctx, o.addrs)
	if err != nil {
		return "", err
	}
	for _, obj := range objs {
		if !obj.foreign() && obj.Metadata[stripeprovider.IntentIDMetadataKey] == strconv.FormatInt(id, 10) {
			return obj.ID, nil
		}
	}
	return "", errNothingToDo
}

// effectsAt counts the effects the double performed for this deployment's
// intent id.
func (o *operator) effectsAt(ctx context.Context, kind string, id int64) (int, error) {
	switch kind {
	case stripeprovider.KindPaymentIntent:
		objs, err := stripeObjects(ctx, o.addrs)
		if err != nil {
			return 0, err
		}
		return ourEffects(objs)[strconv.FormatInt(id, 10)], nil
	case sendgridprovider.KindEmail:
		var st struct {
			EffectsByIntent map[string]int `json:"effects_by_intent"`
		}
		if err := getJSON(ctx, o.addrs.SendGridControlURL+"/_double/stats", &st); err != nil {
			return 0, err
		}
		return st.EffectsByIntent[strconv.FormatInt(id, 10)], nil
	}
	// A refund, capture or cancel: this operator checks payments and
	// emails only, and leaves the rest alone.
	return 0, errNothingToDo
}

func (o *operator) count(k string) {
	o.mu.Lock()
	o.n[k]++
	o.mu.Unlock()
}

func (o *operator) errors() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.errs...)
}

func (o *operator) counts() map[string]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make(map[string]int, len(o.n))
	for k, v := range o.n {
		out[k] = v
	}
	return out
}

// stripeObjects lists the Stripe double's PaymentIntents.
func stripeObjects(ctx context.Context, a DoublesAddrs) ([]StripeObject, error) {
	var objs []StripeObject
	err := getJSON(ctx, a.StripeURL+PaymentIntentsPath, &objs)
	return objs, err
}

// received is what the PaymentIntent charged, as Stripe's amount_received:
// nothing until it succeeded, then what was captured (the whole amount for
// an automatic capture).
func (o StripeObject) received() int64 {
	switch {
	case o.Status != "succeeded":
		return 0
	case o.AmountReceived != 0:
		return o.AmountReceived
	}
	return o.Amount
}

// foreign reports whether a PaymentIntent belongs to the other deployment.
func (o StripeObject) foreign() bool {
	return o.Metadata[providers.MetadataNamespace] == ForeignNamespace
}

// ourEffects counts this deployment's PaymentIntents by intent id.
func ourEffects(objs []StripeObject) map[string]int {
	out := map[string]int{}
	for _, o := range objs {
		if !o.foreign() {
			out[o.Metadata[stripeprovider.IntentIDMetadataKey]]++
		}
	}
	return out
}
